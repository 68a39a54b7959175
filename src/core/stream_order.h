// How a block used on several streams returns to a stream-ordered pool (the CUDA pool frees with
// cudaFreeAsync: the block is reusable by later work of the freeing stream once that stream gets
// there). Freeing on the stream the block was allocated in the order of is safe for that stream's
// work; work queued on other streams (a copy stream, a communication stream) may still read it.
// So before the free, the allocation stream waits for an event recorded on each other stream that
// used the block: the block goes back only after every user passed its last use, never earlier,
// and the host never waits. (PyTorch's caching allocator defers the free on the host until the
// events complete; with a stream-ordered pool the device can do the waiting.)
//
// Api: record_event(stream) -> Event, wait_event(stream, Event), release_event(Event),
// free_async(ptr, stream). The CUDA runtime passes the real calls; tests pass a simulated clock.
#pragma once

#include "gradus/core/storage.h"

namespace gradus::detail {

template <typename Api>
void free_after_uses(Api& api, void* ptr, const StreamUses& uses) {
  for (void* stream : uses.others) {
    auto event = api.record_event(stream);     // the point of this stream's last use
    api.wait_event(uses.allocated_on, event);  // the allocation stream gets there first
    api.release_event(event);                  // released once it has fired (CUDA semantics)
  }
  api.free_async(ptr, uses.allocated_on);
}

}  // namespace gradus::detail

// The stream-ordered free of a block used on several streams (src/core/stream_order.h), against a
// simulated device: each stream is a timeline whose queued work ends at some time; an event marks
// the end of what its stream had queued; a stream that waits on an event cannot get past it
// before it fires; a freed block becomes reusable when the freeing stream reaches the free.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <vector>

#include "core/stream_order.h"
#include "gradus/core/storage.h"

namespace gradus {
namespace {

struct SimulatedDevice {
  std::map<void*, double> tail;  // when each stream's queued work finishes
  std::map<void*, double> reusable_at;
  int events_recorded = 0, events_released = 0;

  double record_event(void* stream) {
    ++events_recorded;
    return tail[stream];
  }
  void wait_event(void* stream, double fires_at) {
    tail[stream] = std::max(tail[stream], fires_at);
  }
  void release_event(double) { ++events_released; }
  void free_async(void* ptr, void* stream) { reusable_at[ptr] = tail[stream]; }
};

void* stream(int i) {
  return reinterpret_cast<void*>(static_cast<uintptr_t>(0x1000 + i));
}

TEST(StreamOrder, ABlockReadOnAnotherStreamIsNotReusedBeforeThatStreamIsDone) {
  SimulatedDevice dev;
  void* block = reinterpret_cast<void*>(0x42);
  dev.tail[stream(0)] = 3.0;   // compute stream: done with the block at t = 3
  dev.tail[stream(1)] = 10.0;  // copy stream: still reading it until t = 10
  dev.tail[stream(2)] = 7.0;   // communication stream: until t = 7
  detail::free_after_uses(dev, block, {stream(0), {stream(1), stream(2)}});
  EXPECT_EQ(dev.reusable_at.at(block), 10.0);
  EXPECT_EQ(dev.events_recorded, 2);
  EXPECT_EQ(dev.events_released, 2);
  // Later compute-stream work (a new allocation reusing the block) runs after t = 10.
  EXPECT_EQ(dev.tail[stream(0)], 10.0);
}

TEST(StreamOrder, WithoutOtherStreamsTheFreeIsOrderedOnTheAllocationStreamAlone) {
  SimulatedDevice dev;
  void* block = reinterpret_cast<void*>(0x42);
  dev.tail[stream(0)] = 3.0;
  dev.tail[stream(1)] = 10.0;  // a stream that never used the block does not delay it
  detail::free_after_uses(dev, block, {stream(0), {}});
  EXPECT_EQ(dev.reusable_at.at(block), 3.0);
  EXPECT_EQ(dev.events_recorded, 0);
}

// Storage keeps the streams recorded on it once each, never the allocation stream itself.
TEST(StreamOrder, StorageRecordsEachOtherStreamOnce) {
  StorageImpl storage(64, Device::cpu());
  EXPECT_EQ(storage.stream_uses().allocated_on, nullptr);  // the CPU has no stream order
  storage.record_stream(stream(1));
  storage.record_stream(stream(1));
  storage.record_stream(stream(2));
  storage.record_stream(nullptr);
  const StreamUses uses = storage.stream_uses();
  EXPECT_EQ(uses.others, (std::vector<void*>{stream(1), stream(2)}));
}

}  // namespace
}  // namespace gradus

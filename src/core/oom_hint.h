// What every out-of-memory error suggests (the CPU allocator's under a memory limit and the CUDA
// pool's), after which each names its own memory_stats(). Only remedies that exist: gradus train's
// options and their C++ counterparts (find_batch_size, Module::set_checkpoint /
// Sequential::checkpoint_every, amp::Autocast, Module::freeze). tests/cli checks that `train`
// has every option named here.
#pragma once

namespace gradus::detail {

inline constexpr const char* kOutOfMemoryHint =
    "Hint: use a smaller --batch-size (--batch-size auto finds the largest that fits), "
    "recompute activations in backward with --grad-checkpoint, keep them in 16 bits with "
    "--amp bf16, or --freeze layers you do not train (in C++: find_batch_size, "
    "Module::set_checkpoint, amp::Autocast, Module::freeze)";

}  // namespace gradus::detail

// Settings every rank of a data-parallel group must share, compared before the first collective
// that depends on them. Ranks started with different options would otherwise issue collectives
// of different sizes (a crash inside MPI) or train different runs whose results get mixed (a
// silent wrong answer); instead every rank ends with one message naming each key that differs
// and each rank's value. The Trainer checks its model and run this way, and whatever settings
// its caller adds (TrainerOptions::rank_agreement).
#pragma once

#include <map>
#include <string>

#include "gradus/dist/process_group.h"
#include "gradus/nn/module.h"

namespace gradus::train {

using Settings = std::map<std::string, std::string>;

// Collective over `group` (a no-op for a group of one). Throws ValueError on every rank when the
// ranks' settings differ: "<who>: the ranks were not started with the same run (<what>): ..."
void check_ranks_agree(dist::ProcessGroup& group, const Settings& settings, const std::string& who,
                       const std::string& what);

// The names, shapes and dtypes of a module's parameters and buffers, summarised in one line
// (count, elements and a CRC-32 of the list): equal for two modules built the same way.
std::string module_signature(const nn::Module& module);

}  // namespace gradus::train

#include "run_state.h"

#include <cstdio>
#include <cstdlib>
#include <nlohmann/json.hpp>

#include "gradus/core/error.h"

namespace gradus::cli {

namespace {

using json = nlohmann::ordered_json;

// Keys whose change makes a resumed run a different computation: refusing is the only safe
// answer (a silently different batch size or optimizer would corrupt the run).
constexpr const char* kStrictKeys[] = {
    "format_version", "model", "dropout", "data", "limit_train", "batch_size", "optimizer", "lr",
    "momentum", "weight_decay", "scheduler", "warmup_steps", "step_gamma", "step_epochs", "seed",
    "freeze", "amp",
    // the language model's (absent from image runs)
    "gpt", "iters", "min_lr", "beta2", "grad_clip", "vocab_size"};
// Keys that may change on resume, with what the change means.
struct SoftKey {
  const char* key;
  const char* note;
};
constexpr SoftKey kSoftKeys[] = {
    {"epochs",
     "the run continues to the new number of epochs; the cosine/step LR schedule is recomputed "
     "for the new length, so the result differs from an uninterrupted run"},
    {"threads",
     "results on the CPU can differ in the last bits with the thread count (conv2d weight "
     "gradients), so the run is no longer bitwise reproducible"},
    {"device", "the run continues on another device; results differ in the last bits"},
};

std::string show(const json& v) {
  return v.is_null() ? std::string("(absent)") : v.dump();
}

}  // namespace

std::string run_config_json(const TrainOptions& o, int threads, const std::string& device) {
  json j;
  j["format_version"] = 1;
  j["model"] = o.model;
  j["dropout"] = o.dropout;
  j["data"] = o.data;
  j["limit_train"] = o.limit_train;
  j["batch_size"] = o.batch_size;
  j["epochs"] = o.epochs;
  j["optimizer"] = o.optimizer;
  j["lr"] = o.lr;
  j["momentum"] = o.momentum;
  // The effective value, so that the default and the same value given explicitly compare equal.
  j["weight_decay"] = o.weight_decay >= 0 ? o.weight_decay : (o.optimizer == "adamw" ? 1e-2 : 0.0);
  j["scheduler"] = o.scheduler;
  j["warmup_steps"] = o.warmup_steps;
  j["step_gamma"] = o.step_gamma;
  j["step_epochs"] = o.step_epochs;
  j["seed"] = o.seed;
  // Only when given, so checkpoints of runs without it compare equal to older ones.
  if (!o.freeze.empty()) j["freeze"] = o.freeze;
  if (o.amp != "off") j["amp"] = o.amp;
  if (!o.init_from.empty()) j["init_from"] = o.init_from;  // informational: --resume loads state
  // Not a strict key: recomputation gives the same gradients, so a run may resume with or without.
  if (o.grad_checkpoint > 0) j["grad_checkpoint"] = o.grad_checkpoint;
  if (o.model == "gpt" || o.model == "llama") {
    // The shape and the schedule's length change what the weights mean; the data file's name
    // does not (the same text may move).
    j["gpt"] = {{"context", o.gpt.context},
                {"layers", o.gpt.layers},
                {"heads", o.gpt.heads},
                {"width", o.gpt.width}};
    if (o.model == "llama") {
      j["gpt"]["kv_heads"] = o.gpt.kv_heads;
      j["gpt"]["ffn_width"] = o.gpt.ffn_width;
      j["gpt"]["rope_theta"] = o.gpt.rope_theta;
      // Only when given, so checkpoints of untied runs compare equal to older ones.
      if (o.gpt.tie_embeddings) j["gpt"]["tie_embeddings"] = true;
    }
    j["iters"] = o.iters;
    j["min_lr"] = o.min_lr;
    j["beta2"] = o.beta2;
    j["grad_clip"] = o.grad_clip;
    j["vocab_size"] = o.vocab_size;
    j["weight_decay"] = o.weight_decay >= 0 ? o.weight_decay : 0.1;  // the LM's AdamW default
  } else if (o.given.count("grad-clip")) {
    j["grad_clip"] = o.grad_clip;
  }
  j["threads"] = threads;
  j["device"] = device;
  return j.dump();
}

std::vector<std::string> check_resume_config(const std::string& stored, const std::string& current,
                                             const std::string& checkpoint_path) {
  json old_cfg, new_cfg = json::parse(current);
  try {
    old_cfg = json::parse(stored);
  } catch (const json::exception& e) {
    throw IOError(detail::str_cat("train: cannot resume from ", checkpoint_path,
                                  ": its stored run configuration is not valid JSON (", e.what(),
                                  ")"));
  }
  GRADUS_CHECK(old_cfg.is_object(), IOError, "train: cannot resume from ", checkpoint_path,
               ": its stored run configuration is not a JSON object");
  auto value = [](const json& cfg, const char* key) {
    return cfg.contains(key) ? cfg.at(key) : json();
  };
  std::string differences;
  for (const char* key : kStrictKeys) {
    const json a = value(old_cfg, key), b = value(new_cfg, key);
    if (a != b) {
      differences += detail::str_cat(differences.empty() ? "" : ", ", key, " (checkpoint ", show(a),
                                     ", now ", show(b), ")");
    }
  }
  GRADUS_CHECK(differences.empty(), ValueError, "train: refusing to resume from ", checkpoint_path,
               ": the run configuration differs from the checkpoint's in: ", differences,
               ". Resume with the checkpoint's settings, or start a new run in another "
               "--checkpoint-dir");
  std::vector<std::string> notes;
  for (const SoftKey& k : kSoftKeys) {
    const json a = value(old_cfg, k.key), b = value(new_cfg, k.key);
    if (a != b) {
      notes.push_back(detail::str_cat(k.key, " differs (checkpoint ", show(a), ", now ", show(b),
                                      "): ", k.note));
    }
  }
  return notes;
}

train::Settings rank_settings(const std::string& config) {
  train::Settings settings;
  const json j = json::parse(config);
  for (const auto& [key, value] : j.items()) {
    // (The thread count and the device may differ by rank, and so may where an --init-from file
    // lies on each host: the weights themselves travel from data rank 0 at setup.)
    if (key != "threads" && key != "device" && key != "init_from") {
      settings["option." + key] = value.dump();
    }
  }
  return settings;
}

}  // namespace gradus::cli

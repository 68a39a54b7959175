// gradus::train: the training layer (how a model and its optimizer spread over ranks). Not part of
// the umbrella gradus/gradus.h: a training program's own train() function, beside
// `using namespace gradus;`, would otherwise be ambiguous with this namespace.
#pragma once

#include "gradus/train/batch_finder.h"
#include "gradus/train/language_model_eval.h"
#include "gradus/train/strategy.h"
#include "gradus/train/trainer.h"

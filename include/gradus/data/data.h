// gradus::data: datasets, the DataLoader and file readers.
#pragma once

#include "gradus/data/augment.h"
#include "gradus/data/bpe_tokenizer.h"
#include "gradus/data/dataloader.h"
#include "gradus/data/dataset.h"
#include "gradus/data/idx.h"
#include "gradus/data/mnist.h"
#include "gradus/data/text.h"

// SPDX-License-Identifier: Apache-2.0
/// @file
/// Umbrella header: the whole public C++ API of tensorfetch.
#pragma once

#include "tensorfetch/byte_range.hpp"
#include "tensorfetch/cache.hpp"
#include "tensorfetch/cancel.hpp"
#include "tensorfetch/checkpoint.hpp"
#include "tensorfetch/dtype.hpp"
#include "tensorfetch/error.hpp"
#include "tensorfetch/format.hpp"
#include "tensorfetch/index.hpp"
#include "tensorfetch/parameters.hpp"
#include "tensorfetch/progress.hpp"
#include "tensorfetch/slice.hpp"
#include "tensorfetch/tp.hpp"
#include "tensorfetch/trace.hpp"
#include "tensorfetch/version.hpp"
#include "tensorfetch/writer.hpp"

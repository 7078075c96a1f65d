// SPDX-License-Identifier: Apache-2.0
#include "tensorfetch/version.hpp"

namespace tensorfetch {

const char* version() noexcept { return TENSORFETCH_VERSION; }

}  // namespace tensorfetch

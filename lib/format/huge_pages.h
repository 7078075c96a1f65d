// SPDX-License-Identifier: Apache-2.0
// Private: memory for large parses. On machines where first-touch page faults are costly,
// backing big buffers with transparent huge pages (madvise) makes parsing a 100 MB header
// several times faster; elsewhere it is harmless.
#pragma once

#include <cstddef>
#include <memory_resource>
#include <span>
#include <vector>

namespace tensorfetch::detail {

/// Asks the kernel to back the 2 MiB-aligned part of [p, p + n) with huge pages. Best effort.
void advise_huge_pages(void* p, std::size_t n) noexcept;

/// Anonymous memory of a fixed size, huge-page-advised when large. Move-only.
class HugeBuffer {
 public:
  HugeBuffer() = default;
  /// Maps `n` zero-filled bytes; throws std::bad_alloc on failure.
  explicit HugeBuffer(std::size_t n);
  HugeBuffer(HugeBuffer&& o) noexcept;
  HugeBuffer& operator=(HugeBuffer&& o) noexcept;
  HugeBuffer(const HugeBuffer&) = delete;
  HugeBuffer& operator=(const HugeBuffer&) = delete;
  ~HugeBuffer();

  [[nodiscard]] std::byte* data() const noexcept { return data_; }
  [[nodiscard]] std::size_t size() const noexcept { return size_; }

 private:
  void release() noexcept;
  std::byte* data_ = nullptr;
  std::size_t size_ = 0;
};

/// A monotonic arena whose large blocks are huge-page-advised mappings. Memory is released
/// only when the arena is destroyed. Not thread-safe. Under AddressSanitizer every allocation
/// is an ordinary heap allocation instead, so that the sanitizer checks its bounds.
class HugePageArena final : public std::pmr::memory_resource {
 public:
  /// `first_block`: size of the first mapping; later ones double.
  explicit HugePageArena(std::size_t first_block = 1 << 20);

 private:
  void* do_allocate(std::size_t bytes, std::size_t alignment) override;
  void do_deallocate(void* p, std::size_t bytes, std::size_t alignment) override;
  bool do_is_equal(const std::pmr::memory_resource& other) const noexcept override {
    return this == &other;
  }

  std::vector<HugeBuffer> blocks_;
  std::size_t next_block_;
  std::size_t used_ = 0;  // in the last block
};

}  // namespace tensorfetch::detail

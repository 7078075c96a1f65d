// SPDX-License-Identifier: Apache-2.0
#include "format/huge_pages.h"

#include <sys/mman.h>

#include <cstdint>
#include <new>
#include <utility>

// Under AddressSanitizer, buffers come from the ordinary heap so that the sanitizer sees every
// allocation's bounds (mappings of our own are invisible to it).
#if defined(__SANITIZE_ADDRESS__)
#define TF_HEAP_ONLY 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define TF_HEAP_ONLY 1
#endif
#endif

namespace tensorfetch::detail {

namespace {
constexpr std::size_t kHugePage = std::size_t{2} << 20;
#ifdef TF_HEAP_ONLY
constexpr bool kHeapOnly = true;
#else
constexpr bool kHeapOnly = false;
#endif
}

void advise_huge_pages(void* p, std::size_t n) noexcept {
  auto begin = reinterpret_cast<std::uintptr_t>(p);
  auto first = (begin + kHugePage - 1) & ~(kHugePage - 1);
  auto last = (begin + n) & ~(kHugePage - 1);
  if (p != nullptr && last > first) {
    ::madvise(reinterpret_cast<void*>(first), last - first, MADV_HUGEPAGE);
  }
}

HugeBuffer::HugeBuffer(std::size_t n) : size_(n) {
  if (n == 0) return;
  if constexpr (kHeapOnly) {
    data_ = new std::byte[n]();
    return;
  }
  void* p = ::mmap(nullptr, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) throw std::bad_alloc();
  data_ = static_cast<std::byte*>(p);
  advise_huge_pages(p, n);
}

HugeBuffer::HugeBuffer(HugeBuffer&& o) noexcept
    : data_(std::exchange(o.data_, nullptr)), size_(std::exchange(o.size_, 0)) {}

HugeBuffer& HugeBuffer::operator=(HugeBuffer&& o) noexcept {
  if (this != &o) {
    release();
    data_ = std::exchange(o.data_, nullptr);
    size_ = std::exchange(o.size_, 0);
  }
  return *this;
}

HugeBuffer::~HugeBuffer() { release(); }

void HugeBuffer::release() noexcept {
  if (data_ == nullptr) return;
  if constexpr (kHeapOnly) {
    delete[] data_;
  } else {
    ::munmap(data_, size_);
  }
  data_ = nullptr;
}

HugePageArena::HugePageArena(std::size_t first_block) : next_block_(first_block) {}

void* HugePageArena::do_allocate(std::size_t bytes, std::size_t alignment) {
  if constexpr (kHeapOnly) return ::operator new(bytes, std::align_val_t(alignment));
  if (!blocks_.empty()) {
    auto& b = blocks_.back();
    std::size_t start = (used_ + alignment - 1) & ~(alignment - 1);
    if (start + bytes <= b.size()) {
      used_ = start + bytes;
      return b.data() + start;
    }
  }
  std::size_t size = next_block_;
  while (size < bytes + alignment) size *= 2;
  next_block_ = size * 2;
  blocks_.emplace_back(size);
  used_ = bytes;  // mmap memory is page-aligned, so any alignment up to 4096 holds at 0
  return blocks_.back().data();
}

void HugePageArena::do_deallocate(void* p, std::size_t bytes, std::size_t alignment) {
  if constexpr (kHeapOnly) ::operator delete(p, std::align_val_t(alignment));
  (void)bytes;
  // Otherwise monotonic: blocks are released with the arena.
}

}  // namespace tensorfetch::detail


// SPDX-License-Identifier: Apache-2.0
// A C++20 program built by tests/capi/test_install.sh against the *installed* headers and
// library (pkg-config flags only): the public C++ API (open, select, view, to_string) and the
// C API side by side, on one checkpoint. Prints one line starting with "ok" on success.
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include <tensorfetch/tensorfetch.h>
#include <tensorfetch/tensorfetch.hpp>

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s CHECKPOINT\n", argv[0]);
    return 1;
  }
  auto checkpoint = tensorfetch::Checkpoint::open(argv[1]);
  if (!checkpoint) {
    std::fprintf(stderr, "open: %s: %s\n", std::string(tensorfetch::to_string(checkpoint.error().code)).c_str(),
                 checkpoint.error().message.c_str());
    return 1;
  }
  std::vector<tensorfetch::Selector> selectors{{"model.layers.0.*", std::nullopt}};
  auto selection = checkpoint->select(selectors);
  if (!selection) {
    std::fprintf(stderr, "select: %s\n", selection.error().message.c_str());
    return 1;
  }

  tf_checkpoint* c = nullptr;
  tf_error* err = nullptr;
  if (tf_open(argv[1], nullptr, &c, &err) != TF_OK) {
    std::fprintf(stderr, "tf_open: %s\n", tf_error_message(err));
    tf_error_free(err);
    return 1;
  }
  int rc = 0;
  if (tf_tensor_count(c) != checkpoint->tensors().size()) rc = 1;
  for (const auto& s : *selection) {
    auto view = checkpoint->view(s.ref);
    if (!view) {
      std::fprintf(stderr, "view: %s\n", view.error().message.c_str());
      rc = 1;
      continue;
    }
    const std::string name(view->name);
    const void* data = nullptr;
    std::size_t len = 0;
    std::size_t index = 0;
    if (tf_find(c, name.c_str(), &index) != 1 || tf_tensor_data(c, name.c_str(), &data, &len) != TF_OK ||
        len != view->bytes.size() || std::memcmp(data, view->bytes.data(), len) != 0 ||
        tensorfetch::to_string(view->dtype) != tf_tensor_dtype(c, index)) {
      std::fprintf(stderr, "tensor %s: C and C++ disagree\n", name.c_str());
      rc = 1;
    }
  }
  tf_close(c);
  if (rc != 0) return rc;
  std::printf("ok %zu tensors, %zu selected, C and C++ bytes agree\n", checkpoint->tensors().size(),
              selection->size());
  return 0;
}

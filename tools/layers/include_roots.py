#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Makes one include root per library layer, so that a layer can include only itself and the
layers below it (lib/meson.build runs this at configure time).

    include_roots.py OUT LIB_DIR PUBLIC_DIR LAYER=PUBLIC,HEADERS ...   (layers bottom first)

For each layer L (in the order given) it makes OUT/L/ holding a symbolic link per layer at or
below L (OUT/L/base -> LIB_DIR/base, ...) and OUT/L/tensorfetch/ with links to the public
headers of those layers only. `#include "fetch/planner.h"` compiled with -I OUT/cache then
fails: there is no OUT/cache/fetch. Every file of PUBLIC_DIR must be given to a layer (a new
public header stops the configuration with a message saying where to assign it).
"""
import os
import shutil
import sys


# The optional bindings above the checkpoint layer, each its own shared library: siblings, not a
# stack -- none sees another's headers (mount must compile without MPI, cluster without libfuse).
BINDINGS = {"cluster", "mount"}


def main(argv):
    if len(argv) < 5:
        sys.exit(__doc__)
    out, lib_dir, public_dir = (os.path.abspath(a) for a in argv[1:4])
    layers = []  # (name, [public headers])
    for spec in argv[4:]:
        name, _, headers = spec.partition("=")
        layers.append((name, [h for h in headers.split(",") if h]))
    assigned = {h for _, hs in layers for h in hs}
    present = set(os.listdir(public_dir))
    if present - assigned:
        sys.exit("include_roots.py: public header(s) %s belong to no layer: add each to the layer it "
                 "belongs to in lib/meson.build (layer_public_headers)" % ", ".join(sorted(present - assigned)))
    if assigned - present:
        sys.exit("include_roots.py: lib/meson.build assigns public header(s) %s that %s does not hold"
                 % (", ".join(sorted(assigned - present)), public_dir))
    if os.path.isdir(out):
        shutil.rmtree(out)
    for i, (name, _) in enumerate(layers):
        root = os.path.join(out, name)
        os.makedirs(os.path.join(root, "tensorfetch"))
        for below, headers in layers[: i + 1]:
            if below in BINDINGS and below != name:
                continue  # a binding does not see another one (see BINDINGS)
            os.symlink(os.path.join(lib_dir, below), os.path.join(root, below))
            for h in headers:
                os.symlink(os.path.join(public_dir, h), os.path.join(root, "tensorfetch", h))


if __name__ == "__main__":
    main(sys.argv)

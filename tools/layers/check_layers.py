#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Checks that the library's layers only reach downward (the meson test `layers`).

    check_layers.py BUILD_DIR LAYER=ARCHIVE ...   (layers bottom first)

1. Includes. For every layer L, one file of lib/L is compiled (preprocessed: -E) with the exact
   command meson uses for it (from BUILD_DIR/compile_commands.json), its source replaced by a
   small probe: a probe that includes a private and a public header of every layer ABOVE L must
   fail ("No such file or directory"), and a probe that includes a header of L and of every
   layer below must succeed (so the failures come from the layer rule, not a broken command).
2. Calls. `nm` lists what each layer's archive defines and what it needs: a symbol one layer
   needs that only a layer above it defines is an upward call.
Prints what it checked, one line each; exit status 1 on any violation.
"""
import json
import os
import shlex
import subprocess
import sys
import tempfile

# A header of each layer (private, then public when the layer has one) for the probes.
PROBES = {
    "base": ["base/fs.h", "tensorfetch/error.hpp"],
    "format": ["format/json_internal.h", "tensorfetch/format.hpp"],
    "net": ["net/http_client.h"],
    "hub": ["hub/location.h"],
    "store": ["store/s3.h"],
    "cache": ["cache/blob.h", "tensorfetch/cache.hpp"],
    "fetch": ["fetch/planner.h", "tensorfetch/progress.hpp"],
    "checkpoint": ["checkpoint/checkpoint_internal.h", "tensorfetch/checkpoint.hpp"],
    "cluster": ["cluster/plan.h", "tensorfetch/mpi.hpp"],  # built with the meson feature `mpi`
    "mount": ["mount/readahead.h", "tensorfetch/mount.hpp"],  # built with the meson feature `fuse`
}


# The optional bindings above checkpoint (tools/layers/include_roots.py): siblings, each
# checked against the core layers below it; another binding counts as above it.
BINDINGS = {"cluster", "mount"}


def below_and_above(names, i):
    """The layers at or below names[i] (itself included) and those above it."""
    layer = names[i]
    below = [n for n in names[: i + 1] if n not in BINDINGS or n == layer]
    above = [n for n in names if n not in below]
    return below, above


def layer_command(commands, layer):
    """The compile command (argument list) of one source file of lib/LAYER, and its directory."""
    for c in commands:
        f = c["file"].replace("\\", "/")
        if ("/lib/%s/" % layer) in f or f.startswith("../lib/%s/" % layer) or f.startswith("lib/%s/" % layer):
            args = c.get("arguments") or shlex.split(c["command"])
            return args, c["directory"], c["file"]
    return None, None, None


def preprocess(args, directory, source, probe_text):
    """Runs the layer's command on a probe instead of `source`: -E to /dev/null. (ok, stderr)."""
    with tempfile.NamedTemporaryFile("w", suffix=".cc", delete=False) as probe:
        probe.write(probe_text)
    try:
        out = []
        skip = False
        for a in args:
            if skip:
                skip = False
                continue
            if a in ("-o", "-MF", "-MQ", "-MT"):
                skip = True
                continue
            if a in ("-c", "-MD", "-MMD") or a == source:
                continue
            out.append(a)
        out += ["-fdiagnostics-color=never", "-E", "-o", os.devnull, probe.name]
        r = subprocess.run(out, cwd=directory, capture_output=True, text=True)
        return r.returncode == 0, r.stderr
    finally:
        os.unlink(probe.name)


def symbols(archive):
    """(defined, undefined) global symbol names of a static archive."""
    r = subprocess.run(["nm", "-P", "-g", archive], capture_output=True, text=True, check=True)
    defined, undefined = set(), set()
    for line in r.stdout.splitlines():
        parts = line.split()
        if len(parts) < 2 or line.endswith(":"):
            continue
        name, kind = parts[0], parts[1]
        if kind == "U":
            undefined.add(name)
        elif kind not in ("w", "v"):  # weak symbols (inline functions, templates) may be anywhere
            defined.add(name)
    return defined, undefined


def main(argv):
    if len(argv) < 3:
        sys.exit(__doc__)
    build_dir = argv[1]
    layers = [a.split("=", 1) for a in argv[2:]]
    names = [n for n, _ in layers]
    with open(os.path.join(build_dir, "compile_commands.json")) as f:
        commands = json.load(f)
    failures = 0
    for i, layer in enumerate(names):
        args, directory, source = layer_command(commands, layer)
        if args is None:
            print("FAIL %s: no compile command for lib/%s in compile_commands.json" % (layer, layer))
            failures += 1
            continue
        lower, uppers = below_and_above(names, i)
        own = "".join('#include "%s"\n' % h for n in lower for h in PROBES[n])
        ok, err = preprocess(args, directory, source, own)
        print("%s %s: its own and lower layers' headers compile with its flags" % ("ok  " if ok else "FAIL", layer))
        if not ok:
            print(err)
            failures += 1
        for upper in uppers:
            for header in PROBES[upper]:
                ok, err = preprocess(args, directory, source, '#include "%s"\n' % header)
                refused = not ok and "No such file or directory" in err
                print("%s %s: #include \"%s\" (layer %s, above) does not compile%s" %
                      ("ok  " if refused else "FAIL", layer, header, upper,
                       (": " + err.strip().splitlines()[0]) if refused and layer == "base" and upper == "checkpoint" else ""))
                if not refused:
                    failures += 1
    syms = {n: symbols(a) for n, a in layers}
    for i, layer in enumerate(names):
        lower, uppers = below_and_above(names, i)
        below = set().union(*(syms[n][0] for n in lower))
        for upper in uppers:
            upward = sorted((syms[layer][1] - below) & syms[upper][0])
            if upward:
                failures += 1
                print("FAIL %s calls up into %s: %s" % (layer, upper, ", ".join(upward[:5])))
        print("ok   %s: calls nothing of the layers above it (nm)" % layer if not any(
            (syms[layer][1] - below) & syms[u][0] for u in uppers) else "")
    print("%d violation(s)" % failures)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))

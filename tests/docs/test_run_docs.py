#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""The docs runner itself (the test `docs_runner`): that it fails on what it must refuse (an
unmarked example, a skip without a reason, a fence without a language, a changed output, a wrong
exit status, a failing doctest, a broken link, an option cli.md lacks or invents) and passes what
it must accept (the `...` and `[..]` wildcards, `exit=N`), each on a page of its own written here.

Environment (tests/docs/meson.build): DOCS_RUNNER, TENSORFETCH_CLI, TENSORFETCH_TEST_SERVER,
TENSORFETCH_REFERENCE_DIR, DOCS_PYTHON (the interpreter of python blocks; empty: none).
"""
from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import tempfile
import textwrap
import unittest
from pathlib import Path
from typing import Tuple

RUNNER = Path(os.environ["DOCS_RUNNER"])
CLI = os.environ["TENSORFETCH_CLI"]
SERVER = os.environ["TENSORFETCH_TEST_SERVER"]
REFERENCE = os.environ.get("TENSORFETCH_REFERENCE_DIR", "")
PYTHON = os.environ.get("DOCS_PYTHON", "")

spec = importlib.util.spec_from_file_location("run_docs", RUNNER)
assert spec is not None and spec.loader is not None
run_docs = importlib.util.module_from_spec(spec)
sys.modules["run_docs"] = run_docs
spec.loader.exec_module(run_docs)


def page(text: str) -> str:
    return textwrap.dedent(text).lstrip("\n").replace("'''", "```")


class RunnerCase(unittest.TestCase):
    def setUp(self) -> None:
        self.tmp = tempfile.TemporaryDirectory(prefix="docs-runner-")
        self.root = Path(self.tmp.name)
        (self.root / "docs").mkdir()

    def tearDown(self) -> None:
        self.tmp.cleanup()

    def run_page(self, text: str, *extra: str) -> Tuple[int, str]:
        path = self.root / "docs" / "page.md"
        path.write_text(page(text))
        args = [sys.executable, str(RUNNER), "--source", str(self.root), "--cli", CLI, "--server", SERVER,
                "--reference", REFERENCE, "--python", PYTHON, *extra, str(path)]
        p = subprocess.run(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=300)
        return p.returncode, p.stdout


class TestRefused(RunnerCase):
    def test_an_unmarked_shell_example_fails(self) -> None:
        rc, out = self.run_page("""
            '''sh
            tensorfetch inspect model.safetensors
            '''
            """)
        self.assertEqual(rc, 1, out)
        self.assertIn("page.md:1: a sh example without a marker", out)

    def test_a_skip_without_a_reason_fails(self) -> None:
        rc, out = self.run_page("""
            <!-- doctest: skip -->
            '''sh
            true
            '''
            """)
        self.assertEqual(rc, 1, out)
        self.assertIn("needs a reason", out)

    def test_a_fence_without_a_language_fails(self) -> None:
        rc, out = self.run_page("""
            '''
            tensorfetch get hf://Org/Model -o x.safetensors
            '''
            """)
        self.assertEqual(rc, 1, out)
        self.assertIn("a fence without a language", out)

    def test_a_marker_must_be_right_before_its_fence(self) -> None:
        rc, out = self.run_page("""
            <!-- doctest: skip: not this one -->
            Some prose between the marker and the fence.

            '''console
            $ true
            '''
            """)
        self.assertEqual(rc, 1, out)
        self.assertIn("a console example without a marker", out)

    def test_a_changed_output_fails_with_a_diff(self) -> None:
        rc, out = self.run_page("""
            <!-- doctest -->
            '''console
            $ tensorfetch inspect model.safetensors --json | python3 -c 'import json,sys; print(len(json.load(sys.stdin)["tensors"]))'
            58
            '''
            """)
        self.assertEqual(rc, 1, out)
        self.assertIn("-58", out)
        self.assertIn("+57", out)

    def test_a_wrong_exit_status_fails(self) -> None:
        rc, out = self.run_page("""
            <!-- doctest -->
            '''sh
            tensorfetch inspect no-such.safetensors
            '''
            """)
        self.assertEqual(rc, 1, out)
        self.assertIn("exit status 1, expected 0", out)

    def test_a_failing_doctest_fails(self) -> None:
        if not PYTHON:
            self.skipTest("no Python package in this build")
        rc, out = self.run_page("""
            <!-- doctest -->
            '''pycon
            >>> 1 + 1
            3
            '''
            """)
        self.assertEqual(rc, 1, out)
        self.assertIn("doctest failed", out)

    def test_a_link_to_a_missing_heading_or_file_fails(self) -> None:
        rc, out = self.run_page("""
            # Page
            See [there](#nowhere), [a file](missing.md) and [fine](#page).
            """)
        self.assertEqual(rc, 1, out)
        self.assertIn("a link to #nowhere: no such heading", out)
        self.assertIn("a link to missing.md: no such file", out)
        self.assertNotIn("#page", out)


class TestAccepted(RunnerCase):
    def test_wildcards_exit_codes_and_page_state(self) -> None:
        rc, out = self.run_page("""
            <!-- doctest -->
            '''sh
            tensorfetch get hf://Org/Model lm_head.weight -o head.safetensors -q
            '''

            <!-- doctest: exit=2 -->
            '''console
            $ printf 'nonsense' > bad.safetensors && tensorfetch inspect bad.safetensors
            tensorfetch: error: bad.safetensors: [..]
            '''

            <!-- doctest -->
            '''console
            $ tensorfetch inspect head.safetensors --all
            head.safetensors: 1 tensor[..]
            ...
            lm_head.weight[..]BF16[..]
            ...
            '''

            <!-- doctest: skip: needs the real Hub -->
            '''sh
            tensorfetch inspect hf://meta-llama/Llama-3.1-8B
            '''
            """)
        self.assertEqual(rc, 0, out)
        self.assertIn("3 run, 1 skipped", out)


class TestMatching(unittest.TestCase):
    def test_ellipsis_lines_and_inline_wildcards(self) -> None:
        m = run_docs.match_output
        self.assertTrue(m(["a", "...", "z"], ["a", "b", "c", "z"]))
        self.assertTrue(m(["a", "...", "z"], ["a", "z"]))
        self.assertTrue(m(["x [..] y"], ["x 1 2 3 y"]))
        self.assertFalse(m(["a", "z"], ["a", "b", "z"]))
        self.assertFalse(m(["x [..] y"], ["x 1 2 3 z"]))
        self.assertFalse(m(["a"], ["a", "extra"]))
        self.assertTrue(m(["a (b) [..] c.d*"], ["a (b) anything c.d*"]))  # regex characters are literal

    def test_console_steps(self) -> None:
        steps = run_docs.parse_console("$ echo a \\\n  b\na b\n$ true\n")
        self.assertEqual(steps, [("echo a \\\n  b", ["a b"]), ("true", [])])

    def test_github_anchors(self) -> None:
        self.assertEqual(run_docs.slug("`get --plan`"), "get---plan")
        self.assertEqual(run_docs.slug("Tensor-parallel slices (`--tp`)"), "tensor-parallel-slices---tp")
        self.assertEqual(run_docs.slug("## `tensorfetch cache ls`".lstrip("# ")), "tensorfetch-cache-ls")


class TestCliCheck(unittest.TestCase):
    def test_missing_and_invented_options_fail(self) -> None:
        with tempfile.TemporaryDirectory() as tmp:
            cli_md = Path(tmp) / "cli.md"
            cli_md.write_text(page("""
                ## Exit codes
                | code | meaning |
                |---|---|
                | 0 | ok |
                | 1 | usage |
                | 2 | format |
                | 3 | network |
                | 4 | integrity |

                ## `tensorfetch cache ls`
                | option | meaning |
                |---|---|
                | `--json`, `--jsonl` | print JSON |
                """))
            failures = "\n".join(run_docs.check_cli(Path(CLI), cli_md))
        self.assertIn("`tensorfetch cache ls --help` prints --cache-dir, missing", failures)
        self.assertIn("the `tensorfetch cache ls` section lists --jsonl, which its --help does not print", failures)
        self.assertIn("no section `## tensorfetch inspect`", failures)
        self.assertNotIn("prints --json,", failures)


if __name__ == "__main__":
    unittest.main(verbosity=2)

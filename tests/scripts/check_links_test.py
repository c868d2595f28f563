"""scripts/check_links.py: every link of the README and docs/ resolves in this tree, and the checker
does find what is broken — a Markdown link to a missing file, and a repository path written as code
in the README or a document at the top of docs/ that does not exist — while it leaves alone web
links, in-page anchors, paths in code blocks, patterns (`results/h200/wgmma-w*`) and the journal's
paths, which are history.

Run by CTest as: python3 tests/scripts/check_links_test.py FLASHBENCH_BINARY SOURCE_DIR (the binary is not needed).
"""
import os
import sys
import tempfile
import unittest
from pathlib import Path

SOURCE_DIR = sys.argv[2] if len(sys.argv) > 2 else os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
sys.path.insert(0, os.path.join(SOURCE_DIR, "scripts"))
import check_links  # noqa: E402


class CheckLinksTest(unittest.TestCase):
    def test_every_link_of_this_tree_resolves(self):
        self.assertEqual(check_links.broken_links(Path(SOURCE_DIR)), [])

    def test_what_is_broken_is_found_and_the_rest_left_alone(self):
        with tempfile.TemporaryDirectory() as tmp:
            root = Path(tmp)
            (root / "docs" / "journal").mkdir(parents=True)
            (root / "scripts").mkdir()
            (root / "scripts" / "real.sh").write_text("")
            (root / "docs" / "usage.md").write_text("# usage\n")
            (root / "README.md").write_text(
                "[usage](docs/usage.md) [anchor](docs/usage.md#flags) [web](https://example.com) [here](#top)\n"
                "[gone](docs/gone.md) `scripts/real.sh` `scripts/missing.sh` `results/h200/wgmma-w*`\n"
                "```sh\nscripts/not-checked-in-a-block.sh `scripts/nor-this.sh`\n```\n")
            (root / "docs" / "journal" / "w01.md").write_text("`scripts/removed-since.sh` [old](../gone.md)\n")
            broken = check_links.broken_links(root)
        self.assertEqual(broken, ["README.md:2: link to 'docs/gone.md' does not resolve",
                                  "README.md:2: path 'scripts/missing.sh' does not exist",
                                  "docs/journal/w01.md:1: link to '../gone.md' does not resolve"])


if __name__ == "__main__":
    unittest.main(argv=sys.argv[:1])

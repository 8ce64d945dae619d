"""What every result JSON of the benchmark scripts records about its run: the git commit of the
sources (git, else $CONVPLAN_GIT_COMMIT for a copy without .git, such as a tree carried to the
GPU machine; None when neither says), whether the tree had changes, the command line, and the host."""

import os
import platform
import shlex
import socket
import subprocess
import sys

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _git(*args):
    try:
        out = subprocess.run(["git", "-C", REPO, *args], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() if out.returncode == 0 else None


def provenance(argv=None):
    """The "provenance" object of a result JSON."""
    commit = _git("rev-parse", "HEAD") or os.environ.get("CONVPLAN_GIT_COMMIT") or None
    status = _git("status", "--porcelain", "--untracked-files=no")
    return {
        "git_commit": commit,
        "git_dirty": None if status is None else bool(status),
        "command_line": shlex.join([sys.executable] + list(sys.argv if argv is None else argv)),
        "host": socket.gethostname(),
        "platform": platform.platform(),
    }


def main(argv):
    """provenance.py stamp FILE CMD...: adds "provenance" (CMD as the command line) to the JSON
    object in FILE, for results written by programs that do not record it (scripts/gpu-bench)."""
    import json
    if len(argv) < 3 or argv[0] != "stamp":
        print("usage: provenance.py stamp FILE CMD...", file=sys.stderr)
        return 2
    path = argv[1]
    try:
        with open(path) as f:
            doc = json.load(f)
    except (OSError, ValueError) as e:
        print(f"provenance.py: {path}: {e}", file=sys.stderr)
        return 1
    if not isinstance(doc, dict):
        print(f"provenance.py: {path}: not a JSON object", file=sys.stderr)
        return 1
    doc["provenance"] = provenance()
    doc["provenance"]["command_line"] = shlex.join(argv[2:])
    with open(path, "w") as f:
        json.dump(doc, f, indent=1)
        f.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

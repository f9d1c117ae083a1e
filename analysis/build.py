"""Regenerate the results pages (analysis/README.md, analysis/questions/*.md and analysis/figures/*.png) from the
tidy tables in analysis/data/.

Usage, from the repository root:

    python analysis/build.py
    python analysis/build.py --collect RUN_DIR --study NAME [--command "graphnorm sweep ..."] [--note "..."]

The second copies a finished sweep folder's tables into analysis/data/NAME/ (with provenance), then rebuilds; list a
new study under its question in analysis/questions.yaml. ``--data``/``--out`` move the data and the pages (tests);
``--questions`` names the structure (default analysis/questions.yaml unless ``--data`` is given: then one page).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:  # collect.py and page.py sit beside this script (analysis/ is not a package)
    sys.path.insert(0, str(HERE))

from collect import collect_sweep  # noqa: E402
from leaderboard.page import build_leaderboard  # noqa: E402
from page import build_page  # noqa: E402
from questions import load_structure  # noqa: E402

PAGE_COMMAND = "python analysis/build.py"
QUESTIONS = HERE / "questions.yaml"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", help="folder of tidy tables (default analysis/data)")
    parser.add_argument("--out", default=str(HERE), help="where README.md and figures/ go (default analysis/)")
    parser.add_argument("--collect", metavar="RUN_DIR", help="a finished sweep folder to add as a study")
    parser.add_argument("--study", help="the study's name (folder under --data); required with --collect")
    parser.add_argument("--command", help="the command that produced RUN_DIR, recorded with the study")
    parser.add_argument("--note", help="a remark shown under the study (e.g. which part of a preset ran)")
    parser.add_argument(
        "--questions", help="the summary and questions (default analysis/questions.yaml when --data is not given)"
    )
    args = parser.parse_args(argv)
    data, out = Path(args.data or HERE / "data"), Path(args.out)
    questions = args.questions or (None if args.data else QUESTIONS)
    try:
        if args.collect:
            if not args.study:
                parser.error("--collect needs --study NAME")
            print(collect_sweep(args.collect, args.study, data, args.command, args.note))
        elif args.study or args.command or args.note:
            parser.error("--study and --command go with --collect RUN_DIR")
        if not data.is_dir():
            raise FileNotFoundError(f"{data} is not a folder of tidy tables (see --data)")
        structure = load_structure(questions) if questions else None
        print(build_page(data, out, PAGE_COMMAND, structure))
        if not args.data:  # the leaderboard's page, from its own results (analysis/leaderboard/results/)
            print(build_leaderboard(out))
    except (FileNotFoundError, ValueError) as error:
        print("error: " + " ".join(str(error).splitlines()), file=sys.stderr)  # one line, whatever the error holds
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())

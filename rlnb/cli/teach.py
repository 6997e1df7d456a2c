"""``rlnb teach build`` (the exercises' student and solution notebooks) and ``rlnb teach
grade`` (a folder of students' notebooks checked)."""

from __future__ import annotations

import argparse


def add_to(sub) -> None:
    teach = sub.add_parser("teach", help="build and grade the exercises of a lab "
                                         "(docs/teaching.md)",
                           description="Exercises with checks for a lab on RL for LLMs.")
    commands = teach.add_subparsers(dest="teach_command", required=True, metavar="COMMAND")
    build = commands.add_parser("build", help="write OUT/student/ (stubs) and OUT/solution/ "
                                              "notebooks from notebooks/exercises/",
                                description="Build each exercise's student copy (stubs, no "
                                            "solution) and solution copy.")
    build.add_argument("out", help="output folder")
    build.add_argument("--source", default=None, metavar="DIR", help="the exercise sources")
    build.add_argument("--update", action="store_true",
                       help="after updating rlnb: refresh the notebooks nobody changed (and "
                            "write the missing ones), keep the changed ones as they are")
    build.add_argument("--only-missing", action="store_true",
                       help="write only the notebooks that are not there (keeps every other "
                            "one, changed or not)")
    build.add_argument("--overwrite", action="store_true",
                       help="replace notebooks changed since they were built (their changes "
                            "are lost)")
    build.set_defaults(func=handle)
    grade = commands.add_parser(
        "grade", help="check a folder of students' notebooks: a table student x function, "
                      "and a CSV",
        description="Check every student notebook under SUBMISSIONS (one folder per student, "
                    "or STUDENT-NN_name.ipynb files) with rlnb's own checks, without running "
                    "its live runs: each function passed, the named mistake, wrong, not "
                    "attempted, or its check call removed. The student's definitions run in "
                    "a separate process with a time limit; the notebook's outputs are not "
                    "trusted. Exit 0 when every notebook was read, 2 on bad input.")
    grade.add_argument("submissions", help="a folder of student notebooks, or one notebook")
    grade.add_argument("--csv", default=None, metavar="FILE",
                       help="also write one row per student, exercise and function to FILE")
    grade.add_argument("--timeout", type=float, default=60.0, metavar="S",
                       help="seconds each check (and a notebook's definitions) may take "
                            "(default 60)")
    grade.add_argument("--source", default=None, metavar="DIR", help="the exercise sources")
    grade.set_defaults(func=handle_grade)


def handle_grade(args: argparse.Namespace) -> int:
    from rlnb.teach.grade import run_grade

    return run_grade(args.submissions, csv_path=args.csv, timeout=args.timeout,
                     source=args.source)


def handle(args: argparse.Namespace) -> int:
    from rlnb.teach.build import run_build

    return run_build(args.out, args.source, prog="rlnb teach build", overwrite=args.overwrite,
                     only_missing=args.only_missing, update=args.update)

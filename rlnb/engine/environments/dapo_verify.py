"""DAPO's math verifier (the "Minerva" check of verl's DAPO recipe, NeMo-RL's
``env.math.math_verify_impl: dapo_math_verify``): string equality after normalising both sides.

    answer  = the text after the last "Answer:" in the response's last 300 characters
    correct = normalise(answer) == normalise(reference)

Normalising keeps what follows the last ``=``, drops articles, spaces, ``\\$``, unit words and
TeX spacing, unwraps ``$..$``, ``\\text{..}``, ``\\textbf{..}``, ``\\overline{..}`` and
``\\boxed{..}``, completes the shorthands ``\\fracab`` and ``\\sqrta``, and removes the commas of
a plain number (Lewkowycz et al., "Solving Quantitative Reasoning Problems with Language Models",
2022, appendix D.1). Unlike ``math_verify`` there is no symbolic equivalence: ``0.5`` and
``\\frac{1}{2}`` differ. The word lists are the recipe's, so the same response gets the same
reward as in NeMo-RL.
"""

from __future__ import annotations

import re

TAIL = 300  # characters of the response searched (the longest MATH-500 answer has 159)
ANSWER = re.compile(r"(?i)Answer\s*:\s*([^\n]+)")
INVALID = "[INVALID]"
# (before, after), applied in this order
REPLACE = (("an ", ""), ("a ", ""), (".$", "$"), ("\\$", ""), ("\\ ", ""), (" ", ""),
           ("mbox", "text"), (",\\text{and}", ","), ("\\text{and}", ","),
           ("\\text{m}", "\\text{}"))
# removed, in this order (units, filler words and TeX spacing)
DROP = ("square", "ways", "integers", "dollars", "mph", "inches", "hours", "km", "units",
        "\\ldots", "sue", "points", "feet", "minutes", "digits", "cents", "degrees", "cm", "gm",
        "pounds", "meters", "meals", "edges", "students", "childrentickets", "multiples",
        "\\text{s}", "\\text{.}", "\\text{\ns}", "\\text{}^2", "\\text{}^3", "\\text{\n}",
        "\\text{}", "\\mathrm{th}", "^\\circ", "^{\\circ}", "\\;", ",\\!", "{,}", '"', "\\dots")
# (pattern, replacement), applied in this order
REWRITE = ((r"(.*?)(\$)(.*?)(\$)(.*)", "$\\3$"),      # keep the first $..$
           (r"(\\text\{)(.*?)(\})", "\\2"),
           (r"(\\textbf\{)(.*?)(\})", "\\2"),
           (r"(\\overline\{)(.*?)(\})", "\\2"),
           (r"(\\boxed\{)(.*)(\})", "\\2"),
           (r"(frac)([^{])(.)", "frac{\\2}{\\3}"),    # \fracab -> \frac{a}{b}
           (r"(sqrt)([^{])", "sqrt{\\2}"))            # \sqrta -> \sqrt{a}


def normalise(answer: str) -> str:
    """The comparable form of a final answer (the module docstring)."""
    text = answer.split("=")[-1]
    for before, after in REPLACE:
        text = text.replace(before, after)
    for word in DROP:
        text = text.replace(word, "")
    for pattern, replacement in REWRITE:
        text = re.sub(pattern, replacement, text)
    text = text.replace("$", "")
    if text.replace(",", "").isdigit():
        text = text.replace(",", "")
    return text.strip()


def extract(response: str) -> str | None:
    """The text after the last ``Answer:`` in the response's last ``TAIL`` characters."""
    found = ANSWER.findall(response[-TAIL:])
    return found[-1] if found else None


def dapo_correct(response: str, reference: str) -> tuple[bool, str | None]:
    """``(correct, extracted answer)`` of one response against its reference answer."""
    answer = extract(response)
    pred = normalise(answer if answer is not None else INVALID)
    return pred == normalise(reference), answer

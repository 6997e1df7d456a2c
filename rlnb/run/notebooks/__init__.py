"""One notebook run headless (``rlnb run``), in this process.

- ``execute``: the run through papermill, its HTML export, its error as one line;
- ``parameters``: the ``-p KEY VALUE`` parameters, read and checked before a kernel starts;
- ``mathjax``: a local MathJax beside each HTML export, so its formulas typeset offline.
"""

from rlnb.run import lazy_modules

__getattr__ = lazy_modules(__name__)  # its modules load on first use (PEP 562)

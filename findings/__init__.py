"""findings: a living findings-document generator for LLM-serving performance work.

Importing the package has no side effects. The public surface is listed in
``__all__``; everything else is internal.
"""

__version__ = "0.1.0"

__all__ = ["__version__"]

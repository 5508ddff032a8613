"""Build the Cython extensions of esched.

Every ``core/**/*.pyx`` becomes the extension ``esched.core.<dotted path>``, every
``services/**/*.pyx`` ``esched.services.<dotted path>`` (benchmarks, the Kafka hash).
Directives live here, in one place; ``ESCHED_CYTHON_DEBUG=1`` turns on bounds
checks, line tracing and the annotated HTML (``cython -a``) for hot-loop review.
"""

import os
from pathlib import Path

import numpy
from Cython.Build import cythonize
from setuptools import Extension, setup

HERE = Path(__file__).resolve().parent
DEBUG = os.environ.get("ESCHED_CYTHON_DEBUG") == "1"

directives = {
    "language_level": 3,
    "boundscheck": DEBUG,
    "wraparound": False,
    "cdivision": True,
    "initializedcheck": DEBUG,
    "nonecheck": False,
    "embedsignature": True,
}
if DEBUG:
    directives["linetrace"] = True


def _cython_include_view() -> Path:
    """A folder where ``esched/core`` points at ``core/``.

    The .pyx files ``cimport esched.core.X``, which Cython resolves through its
    include path as ``esched/core/X.pxd``; the source tree keeps them at
    ``core/X.pxd`` (the layout is fixed), so the build gets this view of it.
    """
    view = HERE / "build" / "cython-include"
    link = view / "esched" / "core"
    if link.is_symlink() and not link.exists():
        link.unlink()  # dangling, e.g. left by a build run from another directory
    if not link.exists():
        link.parent.mkdir(parents=True, exist_ok=True)
        link.symlink_to(HERE / "core", target_is_directory=True)
    return view


#: Source folder -> the package its extensions belong to.
SOURCES = {"core": "esched.core", "services": "esched.services"}


def _extensions() -> list[Extension]:
    exts = []
    pyxs = [(folder, pyx) for folder in SOURCES for pyx in sorted((HERE / folder).rglob("*.pyx"))]
    for folder, pyx in pyxs:
        rel = pyx.relative_to(HERE / folder).with_suffix("")
        name = SOURCES[folder] + "." + ".".join(rel.parts)
        exts.append(
            Extension(
                name,
                [str(pyx.relative_to(HERE))],
                include_dirs=[numpy.get_include(), str(HERE / "core")],
                define_macros=[("NPY_NO_DEPRECATED_API", "NPY_1_7_API_VERSION")],
                # No FMA contraction: kube's float64 scores are exact products and sums.
                extra_compile_args=(["-O3"] if not DEBUG else ["-O0", "-g"])
                + ["-ffp-contract=off"],
                depends=[str(p.relative_to(HERE)) for p in (HERE / "core").glob("*.h")],
            )
        )
    return exts


setup(
    packages=[
        "esched.core",
        "esched.core.scoring",
        "esched.services",
        "esched.services.store",
        "esched.services.bus",
        "esched.services.sim",
        "esched.schemas",
    ],
    package_dir={
        "esched.core": "core",
        "esched.services": "services",
        "esched.schemas": "schemas",
    },
    ext_modules=cythonize(
        _extensions(),
        compiler_directives=directives,
        annotate=DEBUG,
        include_path=[str(_cython_include_view())],
    ),
    zip_safe=False,
)

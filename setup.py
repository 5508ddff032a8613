"""Build the Cython extensions of esched.

Every ``core/**/*.pyx`` becomes the extension ``esched.core.<dotted path>``, every
``services/**/*.pyx`` ``esched.services.<dotted path>`` (benchmarks, the Kafka hash),
every ``schemas/**/*.pyx`` ``esched.schemas.<dotted path>`` (the request rule, which
the fold cimports).
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


def _package_view() -> Path:
    """A folder where ``esched/<package>`` points at each source folder.

    The source tree keeps the packages at ``core/``, ``services/`` and ``schemas/``
    (the layout is fixed); their installed names are ``esched.core``, ... . Two tools
    need that name on disk: Cython resolves ``cimport esched.core.X`` through its
    include path as ``esched/core/X.pxd``, and mypy finds ``esched.core`` through its
    ``mypy_path`` (pyproject.toml). The build gives both this view of the tree.
    """
    view = HERE / "build" / "package-view"
    for package in ("core", "services", "schemas"):
        link = view / "esched" / package
        if link.is_symlink() and link.resolve() != HERE / package:
            link.unlink()  # dangling or stale, e.g. left by a build run from another directory
        if not link.exists():
            link.parent.mkdir(parents=True, exist_ok=True)
            link.symlink_to(HERE / package, target_is_directory=True)
    return view


#: Source folder -> the package its extensions belong to.
SOURCES = {"core": "esched.core", "services": "esched.services", "schemas": "esched.schemas"}
#: Extension -> the C libraries it links (the hash chain and the signed records' MAC
#: call OpenSSL's SHA-256).
LIBRARIES = {"esched.services.store._chain": ["crypto"], "esched.services.bus._mac": ["crypto"]}


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
                libraries=LIBRARIES.get(name, []),
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
        "esched.services.cli",
        "esched.services.sim",
        "esched.schemas",
        "esched.schemas.validator",
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
        include_path=[str(_package_view())],
    ),
    zip_safe=False,
)

"""Is the installed llama.cpp build portable? ``python -m memoryd.models.buildcheck``.

llama.cpp built with native CPU detection compiles in the AMX kernels of the
build machine, and those crash (SIGSEGV in ``ggml_backend_amx_mul_mat``) on
Sapphire Rapids and later. ``make`` builds a portable wheel; this check runs
after the install and by ``memoryd doctor``, and fails when the library that
Python actually imports reports AMX or AVX-512 features compiled in.
"""

from __future__ import annotations

import re
import sys

# Features a portable x86-64 build must not carry: AMX crashes on the bundled
# model's quantisation, and AVX-512 would make the build non-portable.
UNPORTABLE = ("AMX_INT8", "AMX_BF16", "AMX_TILE", "AVX512")


def system_info() -> str:
    """The feature line llama.cpp prints for the library Python imports."""
    import llama_cpp

    raw = llama_cpp.llama_print_system_info()
    return raw.decode() if isinstance(raw, bytes) else str(raw)


def unportable_features(info: str) -> list[str]:
    """Feature names from ``info`` that are switched on and must not be (``AMX_INT8 = 1`` ...)."""
    found = []
    for name, value in re.findall(r"([A-Z0-9_]+)\s*=\s*(\d+)", info):
        if value != "0" and any(name.startswith(bad) for bad in UNPORTABLE):
            found.append(name)
    return sorted(set(found))


def main() -> int:
    try:
        info = system_info()
    except ImportError as exc:
        sys.stderr.write(f"llama-cpp-python is not importable: {exc}\n")
        return 1
    bad = unportable_features(info)
    if bad:
        sys.stderr.write(f"llama-cpp-python was built with {', '.join(bad)} compiled in; that build "
                         "crashes on CPUs with AMX. Rebuild it portably: `make clean && make run` (the "
                         "Makefile builds with GGML_NATIVE=OFF and installs that wheel).\n")
        return 1
    sys.stdout.write(f"llama.cpp build is portable: {info.strip()}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())

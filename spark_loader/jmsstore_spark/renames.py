"""Local renames in one step, where Linux and the file system have them."""

from __future__ import annotations

import ctypes
import errno
import os

__all__ = ["EXCHANGE", "NOREPLACE", "renameat2"]

NOREPLACE = 1  # RENAME_NOREPLACE: fail with EEXIST if the target exists
EXCHANGE = 2  # RENAME_EXCHANGE: swap source and target

_AT_CWD = -100


def renameat2(source: str, target: str, flags: int) -> bool:
    """Linux ``renameat2(source, target, flags)``: True once done; False
    where the C library, the kernel or the file system does not have it
    (nothing renamed then); ``OSError`` (``FileExistsError`` for EEXIST)
    for any other failure."""
    try:
        call = ctypes.CDLL(None, use_errno=True).renameat2
    except (OSError, AttributeError):
        return False
    call.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    if call(_AT_CWD, os.fsencode(source), _AT_CWD, os.fsencode(target), flags) == 0:
        return True
    err = ctypes.get_errno()
    if err in (errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP):
        return False
    raise OSError(err, os.strerror(err), source, None, target)

"""libember.so loads with ctypes (dlopen) into the Python process, whatever the
allocator it was built with, and works there."""

import ctypes
import os

import pytest

import ember


def find_libember():
    """libember.so of the build the package comes from (<build>/python/ember ->
    <build>/libember.so), or EMBER_LIBEMBER."""
    path = os.environ.get("EMBER_LIBEMBER")
    if path:
        return path
    build = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(ember.__file__))))
    path = os.path.join(build, "libember.so")
    return path if os.path.exists(path) else None


def test_ctypes_load(tmp_path):
    path = find_libember()
    if path is None:
        pytest.skip("no libember.so beside the package (an installed wheel links it in)")
    lib = ctypes.CDLL(path)
    lib.ember_version.restype = ctypes.c_char_p
    assert lib.ember_version().decode() == ember.__version__
    lib.ember_strerror.restype = ctypes.c_char_p
    assert lib.ember_strerror(-30001)
    db = ctypes.c_void_p()
    s = ctypes.c_void_p()
    d = str(tmp_path / "ctypes").encode()
    assert lib.ember_open(d, None, ctypes.byref(db)) == 0
    assert lib.ember_session_open(db, ctypes.byref(s)) == 0
    for i in range(1000):
        k = b"key%d" % i
        v = b"value%d" % (i * 3)
        assert lib.ember_put(s, k, ctypes.c_size_t(len(k)), v, ctypes.c_size_t(len(v))) == 0
    buf = ctypes.create_string_buffer(64)
    n = ctypes.c_size_t()
    assert lib.ember_get(s, b"key77", ctypes.c_size_t(5), buf, ctypes.c_size_t(64),
                         ctypes.byref(n)) == 0
    assert buf.raw[:n.value] == b"value231"
    assert lib.ember_session_close(s) == 0
    assert lib.ember_close(db) == 0

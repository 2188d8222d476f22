"""ember.errors: the classes and codes of docs/python.md's table."""

import errno

import pytest

import ember
from ember import _ember, errors

TABLE = [
    ("EINVAL", "InvalidArgument", ValueError),
    ("ENOTFOUND", "NotFound", KeyError),
    ("ERANGE", "RangeError", None),
    ("ETOOBIG", "TooBig", ValueError),
    ("ENOMEM", "NoMemory", MemoryError),
    ("EIO", "IOFailure", OSError),
    ("ECORRUPT", "Corrupt", None),
    ("ENOTEMBER", "NotEmber", None),
    ("EVERSION", "VersionError", None),
    ("EEXIST", "Exists", None),
    ("EBUSY", "BusyError", None),
    ("ESTATE", "StateError", None),
    ("EAGAIN", "Again", None),
    ("ENOSPC", "NoSpace", None),
    ("EREADONLY", "ReadOnly", None),
]


@pytest.mark.parametrize("code_name,cls_name,also", TABLE)
def test_from_code(code_name, cls_name, also):
    code = getattr(_ember, code_name)
    assert getattr(errors, code_name) == code
    cls = getattr(ember, cls_name)
    e = errors.from_code(code, "why")
    assert type(e) is cls
    assert isinstance(e, ember.Error)
    if also is not None:
        assert isinstance(e, also)
    assert e.code == code and e.detail == "why"
    assert "why" in str(e)
    assert _ember.strerror(code)  # the C text exists


def test_errno():
    e = errors.from_code(-errno.ENOENT, "")
    assert isinstance(e, ember.SystemError_) and isinstance(e, OSError)
    assert e.errno == errno.ENOENT and e.code == -errno.ENOENT
    assert "ENOENT" in str(e)


def test_unknown_code():
    e = errors.from_code(-29000, "odd")
    assert type(e) is ember.Error and e.code == -29000

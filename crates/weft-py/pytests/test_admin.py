"""The administrator's verbs of the wheel: layouts, usage and HSM state, without `weft`."""

import pytest


def test_df_lists_every_target(fs):
    rows = fs.df()
    kinds = sorted((r["kind"], r["index"]) for r in rows)
    assert kinds == [("mdt", 0), ("ost", 0), ("ost", 1), ("ost", 2), ("ost", 3)]
    for r in rows:
        assert r["online"] and r["blocks"] >= r["bfree"] >= 0 and r["bsize"] > 0
        assert r["target"].startswith("weft-")


def test_setstripe_getstripe(fs, wdir):
    fs.setstripe(wdir + "/new", count=2, size=1 << 20)
    lay = fs.getstripe(wdir + "/new")
    assert lay["kind"] == "file"
    (c,) = lay["components"]
    assert c["stripe_count"] == 2 and c["stripe_size"] == 1 << 20 and len(c["osts"]) == 2
    with fs.open(wdir + "/new", "r+b") as f:
        f.write(b"x" * (3 << 20))
    assert fs.getsize(wdir + "/new") == 3 << 20

    fs.mkdir(wdir + "/d")
    assert fs.getstripe(wdir + "/d") == {"kind": "dir", "components": []}
    fs.setstripe(wdir + "/d", count=-1)
    (t,) = fs.getstripe(wdir + "/d")["components"]
    assert t["stripe_count"] == -1
    fs.write_bytes(wdir + "/d/f", b"abc")
    assert len(fs.getstripe(wdir + "/d/f")["components"][0]["osts"]) == 4

    with pytest.raises(FileNotFoundError):
        fs.getstripe(wdir + "/missing/x")


def test_hsm_state_of_a_new_file(fs, wdir):
    fs.write_bytes(wdir + "/h", b"data")
    st = fs.hsm_state(wdir + "/h")
    assert st == {"flags": 0, "states": [], "archive_id": 0}

"""Where a run's spool goes when the script names no folder: the user's data folder, never the
working directory. A script started from a checkout of this repository (whose root once held an
`opl` link to the SDK's own source) must not write into ./opl/."""

import opl_client.sdk as sdk


def log_a_run_offline(**kwargs) -> sdk.Run:
    with sdk.init(project="lab", name="n", mode="offline", **kwargs) as run:
        run.log({"train/reward_mean": 0.5}, step=1)
    return run


def test_a_run_started_from_a_checkout_writes_its_spool_to_the_users_data_folder(tmp_path, monkeypatch):
    checkout = tmp_path / "offpolicy-lab"
    (checkout / "opl").mkdir(parents=True)  # the repository root's `opl`, as a folder of the package's source
    (checkout / "opl" / "__init__.py").write_text("")
    monkeypatch.chdir(checkout)
    monkeypatch.delenv("OPL_DIR", raising=False)
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))

    run = log_a_run_offline()

    assert [p.name for p in (checkout / "opl").iterdir()] == ["__init__.py"]
    assert sorted(p.name for p in checkout.iterdir()) == ["opl"]
    assert run.dir.parent == tmp_path / "data" / "opl" / "runs"
    assert (run.dir / "metrics.jsonl").read_text().count("\n") == 1


def test_without_xdg_data_home_the_spool_goes_under_home(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("OPL_DIR", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("XDG_DATA_HOME", "relative/data")  # not absolute: ignored, as the XDG spec says

    run = log_a_run_offline()

    assert run.dir.parent == tmp_path / "home" / ".local" / "share" / "opl" / "runs"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["home"]


def test_opl_dir_and_dir_still_choose_the_folder(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    monkeypatch.setenv("OPL_DIR", str(tmp_path / "spools"))
    assert log_a_run_offline().dir.parent == tmp_path / "spools"
    assert log_a_run_offline(dir=tmp_path / "mine").dir == tmp_path / "mine"
    assert not (tmp_path / "data").exists()

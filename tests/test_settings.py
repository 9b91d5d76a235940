"""iba_core.settings: what the environment sets."""
from __future__ import annotations

from iba_core import settings


def test_stats_samples_reads_the_environment(monkeypatch) -> None:
    monkeypatch.delenv(settings.STATS_SAMPLES_ENV, raising=False)
    assert settings.stats_samples() == settings.RECOMMENDED_SAMPLES == 1000
    monkeypatch.setenv(settings.STATS_SAMPLES_ENV, "32")
    assert settings.stats_samples() == 32
    for bad in ("", "zero", "-5", "0", "1.5"):
        monkeypatch.setenv(settings.STATS_SAMPLES_ENV, bad)
        assert settings.stats_samples() == 1000
        assert settings.stats_samples(100) == 100  # a caller's default where the variable says nothing
    monkeypatch.setenv(settings.STATS_SAMPLES_ENV, "32")
    assert settings.stats_samples(100) == 32


def test_torch_threads_leave_a_core_for_the_server(monkeypatch) -> None:
    monkeypatch.delenv(settings.THREADS_ENV, raising=False)
    assert settings.torch_threads() >= 1
    monkeypatch.setenv(settings.THREADS_ENV, "3")
    assert settings.torch_threads() == 3
    monkeypatch.setenv(settings.THREADS_ENV, "lots")
    assert settings.torch_threads() >= 1


def test_cache_dir_follows_the_environment(monkeypatch, tmp_path) -> None:
    monkeypatch.setenv(settings.CACHE_DIR_ENV, str(tmp_path))
    assert settings.cache_dir() == tmp_path


def test_trust_code_is_off_unless_the_owner_sets_it(monkeypatch) -> None:
    monkeypatch.delenv(settings.TRUST_CODE_ENV, raising=False)
    assert settings.trust_code() is False
    for on in ("1", "true", " YES "):
        monkeypatch.setenv(settings.TRUST_CODE_ENV, on)
        assert settings.trust_code() is True
    for off in ("", "0", "no", "maybe"):
        monkeypatch.setenv(settings.TRUST_CODE_ENV, off)
        assert settings.trust_code() is False


def test_data_dirs_split_on_the_path_separator(monkeypatch, tmp_path) -> None:
    import os

    monkeypatch.delenv(settings.DATA_DIRS_ENV, raising=False)
    assert settings.data_dirs() == ()
    monkeypatch.setenv(settings.DATA_DIRS_ENV, f"{tmp_path / 'a'}{os.pathsep}{os.pathsep} {tmp_path / 'b'} ")
    assert settings.data_dirs() == (tmp_path / "a", tmp_path / "b")


def test_relative_data_dirs_resolve_against_the_working_folder(monkeypatch, tmp_path) -> None:
    """A relative IBA_DATA_DIRS entry means the folder under where the app was started, not under whatever
    folder is current when a path is checked later."""
    from iba_core.trust import Trust, server_path_allowed

    (tmp_path / "photos").mkdir()
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv(settings.DATA_DIRS_ENV, "photos")
    assert settings.data_dirs() == (tmp_path / "photos",)
    assert all(p.is_absolute() for p in settings.data_dirs())
    trust = Trust.for_app()
    monkeypatch.chdir(tmp_path.parent)
    assert server_path_allowed(tmp_path / "photos" / "x.png", trust)
    assert not server_path_allowed(tmp_path.parent / "photos" / "x.png", trust)


def test_every_setting_is_in_the_docstring_table() -> None:
    names = [value for name, value in vars(settings).items() if name.endswith("_ENV")]
    assert len(names) >= 7
    for value in names:
        assert f"| {value} " in settings.__doc__, value


def test_only_loopback_addresses_count_as_local() -> None:
    """The app lets visitors type any server path only when it listens on this machine alone: a loopback IP
    literal or "localhost"; a host name that merely starts with "127." is anywhere."""
    from iba_core.trust import is_local_address

    for local in ("127.0.0.1", "127.1.2.3", "::1", "[::1]", "localhost", " LocalHost "):
        assert is_local_address(local), local
    for remote in (None, "", "0.0.0.0", "::", "127.x.example", "127.0.0.1.nip.io", "localhost.example.com",
                   "192.168.1.5", "example.com"):
        assert not is_local_address(remote), remote


def test_named_data_dirs_bound_typed_paths_even_on_a_local_address(monkeypatch, tmp_path) -> None:
    """An app on 127.0.0.1 behind a reverse proxy counts as local; naming IBA_DATA_DIRS still holds it to them."""
    from iba_core.trust import ANY, Trust, server_path_allowed

    monkeypatch.setenv(settings.MODELS_DIR_ENV, str(tmp_path / "models"))
    monkeypatch.delenv(settings.DATA_DIRS_ENV, raising=False)
    assert Trust.for_app(localhost=True).server_paths == ANY
    monkeypatch.setenv(settings.DATA_DIRS_ENV, str(tmp_path / "data"))
    trust = Trust.for_app(localhost=True)
    assert trust.server_paths != ANY
    assert server_path_allowed(tmp_path / "data" / "x.png", trust)
    assert not server_path_allowed("/etc/passwd", trust)

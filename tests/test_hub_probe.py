"""An offline machine gets the hub's error at once: one probe, never the download's retries (issue 56)."""

import pytest

from roofline.core.errors import SpecroofError
from roofline.passes.model import get_model


def _online(monkeypatch, tmp_path):
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path))
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("HF_HUB_ETAG_TIMEOUT", raising=False)


def test_no_network_is_one_probe_and_one_line(tmp_path, monkeypatch):
    hub = pytest.importorskip("huggingface_hub")
    _online(monkeypatch, tmp_path)
    probes, downloads = [], []

    def fake_metadata(url, **kw):  # the network is down: the first request fails
        probes.append((url, kw))
        raise ConnectionError("[Errno -2] Name or service not known")

    def fake_download(*a, **kw):  # the call that retried with backoff for ~25 s: never reached
        downloads.append(a)
        raise AssertionError("hf_hub_download called after the probe failed")

    monkeypatch.setattr(hub, "get_hf_file_metadata", fake_metadata)
    monkeypatch.setattr(hub, "hf_hub_download", fake_download)
    with pytest.raises(SpecroofError) as e:
        get_model("acme/offline-probe-7b")
    assert len(probes) == 1 and downloads == []
    url, kw = probes[0]
    assert url.endswith("acme/offline-probe-7b/resolve/main/config.json")
    assert 0 < kw["timeout"] <= 10 and not kw.get("retry_on_errors", False)
    msg = str(e.value)
    assert "\n" not in msg and "ConnectionError" in msg and "config.json" in msg


def test_the_probe_takes_the_hubs_own_timeout_when_set(tmp_path, monkeypatch):
    hub = pytest.importorskip("huggingface_hub")
    _online(monkeypatch, tmp_path)
    monkeypatch.setenv("HF_HUB_ETAG_TIMEOUT", "2")
    seen = []

    def fake_metadata(url, **kw):
        seen.append(kw["timeout"])
        raise ConnectionError("offline")

    monkeypatch.setattr(hub, "get_hf_file_metadata", fake_metadata)
    with pytest.raises(SpecroofError):
        get_model("acme/offline-timeout-7b")
    assert seen == [2.0]

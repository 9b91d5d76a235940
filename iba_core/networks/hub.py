"""Files of timm and Hugging Face models on the Hugging Face Hub: downloaded once, then read from the cache.

huggingface_hub keeps what it downloads in its cache (HF_HUB_CACHE, by default ~/.cache/huggingface/hub).
Offline (HF_HUB_OFFLINE=1, or the hub not reachable within seconds) only that cache is read, so a machine
without internet answers at once instead of waiting on retries; a file that is not cached is one sentence
saying what to download and where to put it (`HubUnavailableError`).
"""
from __future__ import annotations

from pathlib import Path

from .. import settings
from .spec import WeightsUnavailableError


class HubUnavailableError(WeightsUnavailableError):
    """A model's files are neither in the hub cache nor downloadable (offline, no such repository, gated)."""


def hub_cache() -> Path:
    """huggingface_hub's cache folder (HF_HUB_CACHE / HF_HOME respected, read now, not at import)."""
    return settings.hub_cache_dir()


def hub_endpoint() -> str:
    """The hub's address (HF_ENDPOINT for a mirror)."""
    return settings.hub_endpoint()


def hub_offline() -> bool:
    """Whether only the cache can be read: HF_HUB_OFFLINE=1, or the hub does not answer within seconds."""
    from .weights import _reachable

    return settings.hub_offline() or not _reachable(hub_endpoint())


def hub_file(repo_id: str, filename: str, *, what: str, optional: bool = False,
             offline: bool | None = None) -> Path | None:
    """The local path of `filename` in the hub repository `repo_id`, from the cache or downloaded.

    what: the model as messages name it ("hf:google/vit-base-patch16-224"). optional: None instead of an error
    when the repository has no such file (or, offline, the cache lacks it). offline: the caller's `hub_offline()`
    (asked here when None). Raises HubUnavailableError with what to download where.
    """
    from huggingface_hub import hf_hub_download
    from huggingface_hub.errors import (EntryNotFoundError, GatedRepoError, HfHubHTTPError,
                                        LocalEntryNotFoundError, RepositoryNotFoundError)

    offline = hub_offline() if offline is None else offline
    try:
        return Path(hf_hub_download(repo_id, filename, cache_dir=str(hub_cache()), local_files_only=offline))
    except GatedRepoError:
        raise HubUnavailableError(
            f"{what} is a gated repository on the Hugging Face Hub: accept its terms on {hub_endpoint()}/{repo_id} "
            "and log in (`hf auth login`, or set HF_TOKEN) before it can be downloaded.") from None
    except RepositoryNotFoundError:
        raise HubUnavailableError(
            f"The Hugging Face Hub has no model {repo_id!r} ({what}); check the name on {hub_endpoint()} "
            "(a private one needs `hf auth login` or HF_TOKEN).") from None
    except LocalEntryNotFoundError:
        if optional:
            return None
        raise offline_error(repo_id, what) from None
    except EntryNotFoundError:
        if optional:
            return None
        raise HubUnavailableError(f"The Hugging Face repository {repo_id} ({what}) has no file {filename}.") from None
    except (HfHubHTTPError, OSError, ConnectionError) as err:  # network errors come in many types
        raise offline_error(repo_id, what) from err


def offline_error(repo_id: str, what: str) -> HubUnavailableError:
    """The sentence for a model that is not in the hub cache while the hub cannot be reached."""
    why = "HF_HUB_OFFLINE is set" if settings.hub_offline() else f"{hub_endpoint()} cannot be reached (offline?)"
    return HubUnavailableError(
        f"{what} is not in the Hugging Face cache ({hub_cache()}) and cannot be downloaded: {why}. On a machine "
        f"with internet, download it with `hf download {repo_id}` and copy that machine's cache folder here, or "
        "save the model with save_pretrained (timm: save_for_hf) into a folder and use that folder as the model.",
        cli_hint="Then give --model the folder's path.",
        app_hint="Then add that folder as your network.",
    )

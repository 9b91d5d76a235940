"""CLIP models as networks (`iba_core.networks.clip_models`): a tiny random CLIPModel folder, loaded offline."""
from __future__ import annotations

import shutil

import numpy as np
import pytest
import torch

from clip_fixtures import save_tiny_clip
from iba_core.errors import UserError
from iba_core.networks import FolderError, HubUnavailableError, UnknownModelError, load_network
from iba_core.trust import NotTrustedError, Trust
from source_fixtures import edit_config


def _plain_clip(folder):
    """transformers' own CLIPModel and tokenizer from the folder, as a person would use them."""
    from transformers import CLIPModel, CLIPTokenizer

    return CLIPModel.from_pretrained(str(folder)).eval(), CLIPTokenizer.from_pretrained(str(folder))


def test_a_clip_folder_is_a_network_with_prompts(clip_net, clip_folder):
    from iba_core.networks.clip_models import ClipNetwork, is_clip

    assert isinstance(clip_net, ClipNetwork) and is_clip(clip_net)
    assert clip_net.spec.head == "similarity"
    assert clip_net.spec.layers == tuple(f"vision_model.encoder.layers.{i}" for i in range(4))
    assert clip_net.spec.default_layer == "vision_model.encoder.layers.2"  # 3/4 of 4, one before the last
    assert clip_net.spec.layout(clip_net.spec.default_layer).kind == "tokens"
    assert (clip_net.spec.crop, clip_net.spec.mean) == (32, (0.5, 0.5, 0.5))  # from preprocessor_config.json
    # The same folder given as a plain path is recognised as CLIP, with the same key (statistics are shared).
    plain = load_network(str(clip_folder))
    assert is_clip(plain) and plain.key == clip_net.key == "folder:tiny-clip"
    assert plain.weights_id == clip_net.weights_id != "random"
    assert not is_clip(load_network("resnet50", weights="random"))


def test_outputs_are_transformers_own_cosines(clip_net, clip_folder):
    model, tokenizer = _plain_clip(clip_folder)
    prompts = ["a cat", "a photo of a dog", "a ruler"]
    clip_net.set_prompts(prompts)
    x = torch.randn(3, 3, 32, 32, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        image = model.get_image_features(pixel_values=x).pooler_output
        tokens = tokenizer(prompts, padding=True, return_tensors="pt")
        text = model.get_text_features(**tokens).pooler_output
        expected = torch.nn.functional.cosine_similarity(image[:, None], text[None], dim=-1)
        scaled = model(pixel_values=x, **tokens).logits_per_image / model.logit_scale.exp()
        got = clip_net.model(x)
    assert got.shape == (3, 3)
    torch.testing.assert_close(got, expected, rtol=1e-4, atol=1e-6)
    torch.testing.assert_close(got, scaled, rtol=1e-4, atol=1e-6)  # CLIP's logits without the logit scale
    assert clip_net.categories == prompts and clip_net.class_name(1) == "a photo of a dog"


def test_each_prompt_is_encoded_once_and_prompts_are_kept_apart_from_the_weights(clip_net, monkeypatch):
    encoded: list[list[str]] = []
    original = type(clip_net.model).text_embeddings

    def counting(self, texts):
        encoded.append(list(texts))
        return original(self, texts)

    monkeypatch.setattr(type(clip_net.model), "text_embeddings", counting)
    clip_net.set_prompts(["a red cat", "a red dog"])
    clip_net.set_prompts(["a red dog", " a   red cat ", "a red watermark", "a red dog"])  # cleaned, no duplicates
    assert clip_net.prompts == ("a red dog", "a red cat", "a red watermark")
    assert encoded == [["a red cat", "a red dog"], ["a red watermark"]]  # each prompt once
    clip_net.set_prompts(["a dog", "a cat", "a watermark"])
    assert clip_net.prompt_index(" a cat") == 1 and clip_net.prompt_index("a ruler") == 3
    assert clip_net.class_index("a ruler") == 3 and clip_net.class_index("2") == 2
    assert "prompt_embeddings" not in clip_net.model.state_dict()  # never saved with the weights
    assert clip_net.model(torch.zeros(1, 3, 32, 32)).shape == (1, 4)
    with pytest.raises(UserError, match="empty"):
        clip_net.set_prompts(["a cat", "  "])


def test_a_working_copy_keeps_the_prompts(clip_net):
    from iba_core.methods.base import working_copy

    clip_net.set_prompts(["a cat", "a dog"])
    copy = working_copy(clip_net.model)
    x = torch.randn(1, 3, 32, 32, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        torch.testing.assert_close(copy(x), clip_net.model(x))


def test_preprocessing_defaults_to_clip_processors_without_a_processor_file(tmp_path):
    from iba_core.networks.clip_models import CLIP_MEAN, CLIP_STD

    folder = save_tiny_clip(tmp_path / "no-processor", processor=False)
    net = load_network(folder, weights="random")
    assert net.weights_id == "random" and net.spec.head == "similarity"
    assert (net.spec.crop, net.spec.resize, net.spec.interpolation) == (32, 32, "bicubic")
    assert net.spec.mean == CLIP_MEAN and net.spec.std == CLIP_STD


def test_a_folder_without_a_tokenizer_or_not_clip_is_one_sentence(tmp_path, clip_folder):
    folder = save_tiny_clip(tmp_path / "no-tokenizer", tokenizer=False)
    with pytest.raises(UserError, match="has no tokenizer"):
        load_network(folder)
    from source_fixtures import save_hf_vit

    vit = save_hf_vit(tmp_path / "vit")
    with pytest.raises(FolderError, match="not a clip one"):
        load_network(f"clip:{vit}")
    with pytest.raises(UnknownModelError, match="neither a folder nor a Hugging Face id"):
        load_network("clip:no such/thing here")


def test_a_clip_folder_with_its_own_code_is_refused_unless_allowed(tmp_path, clip_folder):
    folder = tmp_path / "with-code"
    shutil.copytree(clip_folder, folder)
    edit_config(folder, auto_map={"AutoModel": "modeling_x.XModel"})
    for key in (str(folder), f"clip:{folder}"):
        with pytest.raises(NotTrustedError, match="comes with its own modelling code"):
            load_network(key)
    # Allowed, the model loads (CLIPModel is transformers' own class: the named code is never imported).
    from iba_core.networks.clip_models import is_clip

    assert is_clip(load_network(f"clip:{folder}", trust=Trust.local(code=True)))


def test_a_hub_id_loads_from_the_hub_cache_and_offline_says_what_to_fetch(clip_folder, monkeypatch, offline_hub):
    with pytest.raises(HubUnavailableError):
        load_network("clip:openai/clip-vit-base-patch32")
    from iba_core.networks import hub

    def cached(repo, filename, *, what, optional=False, offline=None):
        path = clip_folder / filename
        return path if path.is_file() else None

    monkeypatch.setattr(hub, "hub_file", cached)
    net = load_network("clip:openai/clip-vit-base-patch32")
    assert net.key == "clip:openai/clip-vit-base-patch32" and net.spec.head == "similarity"
    assert net.weights_id == "clip-vit-base-patch32@tiny-clip"  # the snapshot folder names the revision


def test_statistics_do_not_depend_on_the_prompts(clip_net, tmp_path, monkeypatch):
    from iba_core.feature_stats import stats_cache_path, stats_for_run

    monkeypatch.setenv("IBA_CACHE_DIR", str(tmp_path / "cache"))
    layer = clip_net.spec.default_layer
    clip_net.set_prompts(["a cat"])
    first = stats_for_run(clip_net, layer, n=4)
    key = (clip_net.key, clip_net.weights_id)
    clip_net.set_prompts(["a dog", "a ruler", "a watermark"])
    assert (clip_net.key, clip_net.weights_id) == key
    again = stats_for_run(clip_net, layer, n=4)  # from the cache: the same file, whatever the prompts
    assert again.source_key == first.source_key
    assert stats_cache_path(clip_net.key, clip_net.weights_id, layer, first.source_key).is_file()
    np.testing.assert_array_equal(again.mean.numpy(), first.mean.numpy())
    # Estimated afresh, the layer's statistics are the same under other prompts: the vision tower never reads them.
    from iba_core.feature_stats import estimate_stats

    batches = [torch.randn(3, 3, 32, 32, generator=torch.Generator().manual_seed(2))]
    mean_a, std_a, _ = estimate_stats(clip_net.prefix(layer), batches)
    clip_net.set_prompts(["a photo"])
    mean_b, std_b, _ = estimate_stats(clip_net.prefix(layer), batches)
    torch.testing.assert_close(mean_a, mean_b, rtol=0, atol=0)
    torch.testing.assert_close(std_a, std_b, rtol=0, atol=0)


def test_the_stage_list_is_the_model_and_reads_new_prompts(clip_net):
    """The Per-Sample Bottleneck runs the blocks after its layer only (stages); prompts added after the split was
    built count at once."""
    from iba_core.feature_stats import FeatureStats
    from iba_core.per_sample import BottleneckSettings, PerSampleBottleneck

    clip_net.set_prompts(["a cat", "a dog"])
    layer = clip_net.spec.default_layer
    assert clip_net.split_path(layer) == "stages"
    x = torch.randn(2, 3, 32, 32, generator=torch.Generator().manual_seed(4))
    prefix, suffix = clip_net.fast_split(layer)
    with torch.no_grad():
        torch.testing.assert_close(suffix(prefix(x)), clip_net.model(x), rtol=1e-4, atol=1e-6)
    shape = tuple(prefix(x).shape[1:])
    stats = FeatureStats(torch.zeros(shape), torch.ones(shape), 1, clip_net.key, clip_net.weights_id, layer, "N(0,1)")
    bottleneck = PerSampleBottleneck.for_network(clip_net, layer, stats, BottleneckSettings(beta_k=0.1, steps=1,
                                                                                             precision="fp32"))
    index = clip_net.prompt_index("a watermark")  # after the split was built
    result = bottleneck.attribute(x[:1], index)
    assert result.path == "stages"
    with torch.no_grad():
        assert result.p_without == pytest.approx(float(clip_net.model(x[:1])[0, index]), rel=1e-4)
        assert suffix(prefix(x)).shape == (2, 3)


def test_a_clip_network_without_prompts_asks_for_one(clip_folder):
    from iba_core.networks.clip_models import NO_PROMPTS

    net = load_network(clip_folder)
    assert net.prompts == () and net.categories == []
    x = torch.zeros(1, 3, 32, 32)
    with pytest.raises(UserError) as err:
        net.top_k(x)
    assert str(err.value) == NO_PROMPTS and "--prompt TEXT" in err.value.cli_hint and "Type a prompt" in \
        err.value.app_hint
    net.set_prompts(["a cat"])
    assert [name for _, name, _ in net.top_k(x)] == ["a cat"]


def test_prompts_and_kept_embeddings_are_bounded(clip_folder, monkeypatch):
    from iba_core.networks import clip_models

    net = load_network(clip_folder)
    monkeypatch.setattr(clip_models, "MAX_PROMPTS", 3)
    monkeypatch.setattr(clip_models, "MAX_KEPT_TEXTS", 2)
    with pytest.raises(UserError, match="4 text prompts are more than the 3"):
        net.set_prompts(["a", "b", "c", "d"])
    for prompts in (["a", "b"], ["c"], ["d"], ["e"]):
        net.set_prompts(prompts)
    assert list(net.model._text_cache) == ["c", "d", "e"]  # the current one and the 2 most recent others
    first = net.model(torch.zeros(1, 3, 32, 32))
    net.set_prompts(["a", "e"])  # dropped ones are encoded again, to the same embedding
    torch.testing.assert_close(net.model(torch.zeros(1, 3, 32, 32))[:, 1], first[:, 0])

"""Concepts across a folder run: what the network uses, found in its bottleneck layer and ranked by the bits
they carry (issue #41; docs/concepts.md).

- `discover`: `find_concepts(network, RUN_DIR)` per class and for the whole run, resumable (`ConceptSettings`,
  `ConceptsSummary`);
- `factorise`: NMF of the layer's location vectors (scikit-learn), K by the error's elbow;
- `measures`: a concept's numbers, one formula each (bits share, presence, area, peaks, the shortcut flag);
- `layer_pass`: the layer's activations, and the class probability with a concept removed or kept alone;
- `group_table`: a group's concept rows, ordered, flagged;
- `store`: the concept set inside the run folder; `open_concepts` → `ConceptSet`;
- `words`: where a CLIP model is configured, the prompts that best match a concept's top crops.

Names are imported on first use.
"""
from __future__ import annotations

from ..lazy import lazy_exports

#: public name → module (in this package) that defines it
_PUBLIC = {
    "ConceptSettings": "discover", "ConceptsSummary": "discover", "find_concepts": "discover",
    "estimate_seconds": "discover", "same_network": "discover",
    "ConceptSet": "store", "open_concepts": "store", "list_sets": "store",
    "DEFAULT_WORDS": "words", "concept_words": "words", "words_for_concepts": "words",
}

__all__ = sorted(_PUBLIC)


__getattr__, __dir__ = lazy_exports(__name__, _PUBLIC, globals())

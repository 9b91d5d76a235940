"""The app's state and decisions, with no Streamlit, so they can be tested (and reused) without a running app.

- `state`: the network shared by all sessions and its lock (`SharedModel`, `load_shared`), a finished
  Per-Sample run (`RunRecord`);
- `maps`: attribution maps (and β × layer grids) kept across reruns (`MapCache`, `MapRequest`, `map_key`,
  `grid_key`);
- `statistics`: which feature statistics a run uses (`choose_stats`, `stats_status`, `stats_for_methods`): a
  model card's image folder where it names one, else the sample photos (`domain_warning` for a card's network);
- `checkpoints`: readout checkpoints the Compare page offers (`readout_checkpoints`, `ReadoutCheckpoint`) and
  the command that trains one (`readout_training_command`);
- `models`: the network menu (built-ins, the model cards in the models folder, torchvision classifiers:
  `find_cards`, `network_options`) and adding a network from uploaded files (`add_network`);
- `inputs`: checks of what users give: images (`upload_input`, `sample_input`), object boxes (`box_input`);
- `evaluation`: the Evaluate page's per-image degradation, sanity check and bounding-box helpers;
- `choices`: the choices and defaults the pages offer (β·k, thresholds, methods per network with the
  reasons others cannot run, the Compare page's maps: `compare_request`).

Drawing lives in `iba_core.render`; the pages (pages/) only gather input, call these and draw.
Progress callbacks are `iba_core.progress.ProgressFn`: progress(done, total, label).
"""

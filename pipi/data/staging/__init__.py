"""Stagers: turn a dataset on disk into the layout, frame index and manifest pipi trains on."""

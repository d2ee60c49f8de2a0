"""Checkpoint format: changelogs, manifests, snapshots, retention (see ``layout``)."""

"""Datasets, continual task streams, replay memory and on-device augmentation."""

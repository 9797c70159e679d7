"""The reference semantics: slow on purpose, the ground truth of every engine test."""

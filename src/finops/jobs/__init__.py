"""One-shot job modes: allocation collection and charge collection."""

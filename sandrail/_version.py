"""The version of sandrail, where every module can read it (the recorder
writes it into each cassette's header) without importing the facade."""

__version__ = "0.1.0"

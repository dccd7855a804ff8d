"""The Kubernetes API: the shared connection (api.py) and an agent's exporter pods
(pods.py)."""

from .api import KubeApi
from .pods import ExporterPodWatch, PodDiscovery

__all__ = ["ExporterPodWatch", "KubeApi", "PodDiscovery"]

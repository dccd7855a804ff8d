# The detector's container image (docs/deploy.md "Container image"; the Helm chart runs it).
#
#   docker build -t registry.example.internal/gpu-failure-detector:0.1.0 .
#   docker build --build-arg NUMBA_CPU_NAME=znver3 ...   # kernels tuned for the nodes' CPU
#
# The scorers' numba kernels are compiled at build time into a cache baked into the image, so
# a pod scores from its first tick instead of compiling for tens of seconds (detector/jit.py).
# numba keys that cache by the CPU it compiles for: NUMBA_CPU_NAME=generic (the default) runs
# on any x86-64 node; naming the nodes' CPU (e.g. znver3, sapphirerapids) gives the full vector
# width, and a node with another CPU compiles once into its own cache instead.
# tests/test_image.py checks this recipe and repeats its build steps outside Docker.

ARG PYTHON_IMAGE=python:3.11-slim-bookworm

FROM ${PYTHON_IMAGE} AS wheel
WORKDIR /src
COPY pyproject.toml README.md ./
COPY detector ./detector
COPY rules ./rules
RUN pip wheel --no-cache-dir --no-deps --wheel-dir /wheels .

FROM ${PYTHON_IMAGE}
ARG NUMBA_CPU_NAME=generic
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    NUMBA_CPU_NAME=${NUMBA_CPU_NAME} \
    NUMBA_CACHE_DIR=/var/cache/detector/numba \
    NUMBA_CACHE_SEED_DIR=/opt/detector/numba-cache
COPY --from=wheel /wheels /tmp/wheels
RUN pip install --no-cache-dir /tmp/wheels/*.whl \
    && rm -rf /tmp/wheels \
    && useradd --system --uid 65532 --user-group --no-create-home --shell /usr/sbin/nologin detector
# Compile the kernels: a short replay of the built-in simulated cluster runs the same pipeline
# as `detector run`. The cache it writes is the seed each container copies into its own
# writable NUMBA_CACHE_DIR at start (the chart's points at its /tmp emptyDir).
RUN NUMBA_CACHE_DIR=/opt/detector/numba-cache \
    detector replay --days 0.02 --nodes 2 --quiet > /dev/null \
    && mkdir -p /var/cache/detector/numba /var/lib/detector \
    && chown -R 65532:65532 /var/cache/detector /var/lib/detector
USER 65532:65532
WORKDIR /var/lib/detector
EXPOSE 9108
# The daemon's own liveness endpoint (the chart's probes use /healthz and /readyz too).
HEALTHCHECK --interval=30s --timeout=5s --start-period=60s --retries=3 \
    CMD ["python", "-c", "import urllib.request; urllib.request.urlopen('http://127.0.0.1:9108/healthz', timeout=4)"]
ENTRYPOINT ["detector"]
CMD ["run"]

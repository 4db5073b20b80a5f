# devop.test/python3: Debian's python3 (for `python3 -m http.server` and small scripts), nothing else.
# Build from the repository root: docker build -f standin/images/python3.Dockerfile .
FROM debian:bookworm-slim
RUN apt-get update \
 && apt-get install -y --no-install-recommends python3 \
 && rm -rf /var/lib/apt/lists/*
CMD ["python3"]

# One image for every LakeSync role (gateway, Dagster webserver/daemon, Spark driver).
FROM python:3.11-slim-bookworm
RUN apt-get update && apt-get install -y --no-install-recommends \
        openjdk-17-jre-headless maven postgresql-client \
    && rm -rf /var/lib/apt/lists/*
WORKDIR /app
COPY pyproject.toml README.md ./
COPY lakesync_platform ./lakesync_platform
COPY gateway ./gateway
COPY assets ./assets
COPY resources ./resources
COPY sensors ./sensors
COPY workspace.yaml ./
COPY defs ./defs
RUN pip install --no-cache-dir ".[pipeline]" && lakesync setup --data-dir /var/lib/lakesync
ENV LAKESYNC_DATA_DIR=/var/lib/lakesync
EXPOSE 8000 3000
CMD ["lakesync", "gateway", "--host", "0.0.0.0", "--port", "8000"]

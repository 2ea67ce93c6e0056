#!/usr/bin/env bash
# Waits until a MinIO server started by a test or benchmark serves requests, then creates a bucket:
#   scripts/minio-ready.sh URL BUCKET [SECONDS]   (credentials from AWS_ACCESS_KEY_ID/SECRET)
# /minio/health/live answers as soon as the server listens; requests still get 503
# XMinioServerNotInitialized until /minio/health/ready does, and even after that a first bucket
# PUT was seen to get 503 (CI, k8s-operator-test); so both endpoints, then the PUT retried on 503.
# Exit 0 when the bucket exists (created or already there), 1 with a message otherwise.
set -uo pipefail
url=$1 bucket=$2 limit=${3:-60}
end=$((SECONDS + limit))
until curl -fs "$url/minio/health/live" -o /dev/null && curl -fs "$url/minio/health/ready" -o /dev/null; do
  ((SECONDS < end)) || { echo "minio-ready: $url not live and ready after $limit s" >&2; exit 1; }
  sleep 0.2
done
while :; do
  code=$(curl -sS -o /tmp/minio-ready.$$ -w '%{http_code}' --aws-sigv4 "aws:amz:us-east-1:s3" \
    --user "$AWS_ACCESS_KEY_ID:$AWS_SECRET_ACCESS_KEY" -X PUT "$url/$bucket") || code=000
  case $code in
    200) rm -f /tmp/minio-ready.$$; exit 0 ;;
    409) grep -q BucketAlreadyOwnedByYou /tmp/minio-ready.$$ && { rm -f /tmp/minio-ready.$$; exit 0; } ;;
    503|000) ((SECONDS < end)) && { sleep 0.2; continue; } ;;
  esac
  echo "minio-ready: creating bucket $bucket at $url: HTTP $code $(head -c 300 /tmp/minio-ready.$$ 2>/dev/null)" >&2
  rm -f /tmp/minio-ready.$$
  exit 1
done

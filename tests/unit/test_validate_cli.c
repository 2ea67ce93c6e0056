/* The validate CLI against a table of invalid manifests (tests/invalid/) and the examples
 * (api/examples/), through the real binary: exit status and every output line are checked. */
#include <criterion/criterion.h>
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "spec/validate.h"
#include "testutil.h"

typedef struct {
    const char *file;
    int rc;
    const char *lines[4];
} invalid_case;

/* Every file in tests/invalid/ has exactly one row; the test below keeps them in sync. */
static const invalid_case cases[] = {
    {"distinct-preserve-order.yaml",
     1,
     {"distinct-preserve-order.yaml:11:9: spec.stages[0].op: distinct exchanges rows between "
      "tasks, so execution.preserveOrder cannot hold: drop one of them",
      "distinct-preserve-order.yaml:12:38: spec.stages[0].args.missingKey: takes only null, or "
      "the string \"null\" (a record without a key field then has the key null); leave it out "
      "to make such a record a data error"}},
    {"groupby-bad-aggregates.yaml",
     1,
     {"groupby-bad-aggregates.yaml:15:14: spec.stages[0].args.aggregates[0].op: must be one of "
      "count, sum, min, max, mean, std, first, last, collect, got \"median\"",
      "groupby-bad-aggregates.yaml:16:28: spec.stages[0].args.aggregates[1].field: count takes no "
      "field: it counts the group's rows",
      "groupby-bad-aggregates.yaml:17:9: spec.stages[0].args.aggregates[2].field: sum needs a "
      "field (a name)",
      "groupby-bad-aggregates.yaml:18:9: spec.stages[0].args.aggregates[3]: output name \"k\" is "
      "taken (by a key or an earlier aggregate): give it another `as`"}},
    {"groupby-no-keys.yaml",
     1,
     {"groupby-no-keys.yaml:12:11: spec.stages[0].args.keys: required argument of op "
      "\"groupby\" is missing"}},
    {"join-bad-right.yaml",
     1,
     {"join-bad-right.yaml:12:19: spec.stages[0].args.right.uri: must be the right "
      "side's URI (file://, s3://, http(s)://)",
      "join-bad-right.yaml:12:28: spec.stages[0].args.right.format: must be jsonl "
      "or csv (join works on records in this build)",
      "join-bad-right.yaml:12:37: spec.stages[0].args.right.path: unknown field "
      "\"path\" of join's right (uri, format, args)"}},
    {"join-bad-keys.yaml",
     1,
     {"join-bad-keys.yaml:12:49: spec.stages[0].args.on: names field \"k\" twice",
      "join-bad-keys.yaml:12:58: spec.stages[0].args.how: must be one of inner, "
      "left, got \"outer\"",
      "join-bad-keys.yaml:12:81: spec.stages[0].args.broadcastBelow: must be a "
      "size above 0 (bytes, or a quantity such as 64Mi)",
      "join-bad-keys.yaml:12:96: spec.stages[0].args.missingKey: takes only null, "
      "or the string \"null\" (a record without a key field then has the key null); "
      "leave it out to make such a record a data error"}},
    {"join-no-right.yaml",
     1,
     {"join-no-right.yaml:11:9: spec.stages[0].op: join works on records (jsonl, "
      "csv) in this build, not on a parquet source's typed columns",
      "join-no-right.yaml:12:11: spec.stages[0].args.right: required argument of "
      "op \"join\" is missing",
      "join-no-right.yaml:12:18: spec.stages[0].args.on: must be a non-empty list "
      "of strings, got a list"}},
    {"join-over-budget.yaml",
     1,
     {"join-over-budget.yaml:12:72: spec.stages[0].args.broadcastBelow: is 300Mi "
      "(64Mi when left out), above a quarter of execution.memoryBudget (256Mi): "
      "every task that runs the join holds the right side whole; lower it or raise "
      "the budget"}},
    {"limit-zero.yaml",
     1,
     {"limit-zero.yaml:12:18: spec.stages[0].args.rows: must be a positive integer, got 0"}},
    {"limit-after-groupby.yaml",
     1,
     {"limit-after-groupby.yaml:14:9: spec.stages[1].op: limit takes the first rows in source "
      "order, but stage 0 (groupby) exchanges rows before it: put limit before it"}},
    {"repartition-both.yaml",
     1,
     {"repartition-both.yaml:12:11: spec.stages[0].args: op \"repartition\" needs exactly one of "
      "\"partitions\" or \"bytes\""}},
    {"sort-bad-args.yaml",
     1,
     {"sort-bad-args.yaml:12:42: spec.stages[0].args.keys[0].descending: must be true or false",
      "sort-bad-args.yaml:12:49: spec.stages[0].args.keys[1]: must be a map {field: NAME, "
      "descending: false}",
      "sort-bad-args.yaml:12:60: spec.stages[0].args.nulls: must be one of last, first, got "
      "\"middle\"",
      "sort-bad-args.yaml:12:76: spec.stages[0].args.stable: must be a boolean (true or false), "
      "got 1"}},
    {"sort-bad-keys.yaml",
     1,
     {"sort-bad-keys.yaml:12:19: spec.stages[0].args.keys[0].field: must be a non-empty field "
      "name",
      "sort-bad-keys.yaml:12:20: spec.stages[0].args.keys[0].fild: unknown field \"fild\" of a "
      "sort key (field, descending)",
      "sort-bad-keys.yaml:15:18: spec.stages[1].args.keys: must be a list of 1 to 16 keys {field: "
      "NAME, descending: false}",
      "sort-bad-keys.yaml:15:34: spec.stages[1].args.partitions: must be an integer from 1 to "
      "4096, got 0"}},
    {"sort-order-lost.yaml",
     1,
     {"sort-order-lost.yaml:15:40: spec.stages[1].args.stable: stable: true keeps source order "
      "only when the sort's map tasks read the source: streaming mode, every stage before it on "
      "cpu and no all-to-all stage before it",
      "sort-order-lost.yaml:16:5: spec.stages[2]: stage \"after\" after a sort runs in tasks of "
      "its own (execution.mode is not streaming), which would not keep the sort's order: run it "
      "on cpu in streaming mode, or before the sort"}},
    {"shuffle-bad-args.yaml",
     1,
     {"shuffle-bad-args.yaml:12:18: spec.stages[0].args.seed: must be a non-negative integer, got "
      "1.5",
      "shuffle-bad-args.yaml:12:35: spec.stages[0].args.partitions: must be an integer from 1 to "
      "4096, got 0"}},
    {"batchsize-zero.yaml",
     1,
     {"batchsize-zero.yaml:12:16: spec.stages[0].batchSize: must be a positive integer, got 0"}},
    {"binary-garbage.yaml",
     1,
     {"binary-garbage.yaml:1:1: not valid YAML: control characters are not allowed"}},
    {"binary-no-recordsize.yaml",
     1,
     {"binary-no-recordsize.yaml:7:5: spec.source.args.recordSize: required argument of format "
      "\"binary\" is missing"}},
    {"budget-below-partition.yaml",
     1,
     {"budget-below-partition.yaml:15:29: spec.execution.memoryBudget: must hold at least one "
      "partition: 1Mi is less than source.partitionSize 64Mi"}},
    {"compression-unknown.yaml",
     1,
     {"compression-unknown.yaml:9:25: spec.source.args.compression: must be one of auto, none, "
      "gzip, zstd, got \"lzma\""}},
    {"cpu-invalid-quantity.yaml",
     1,
     {"cpu-invalid-quantity.yaml:12:22: spec.stages[0].resources.cpu: quantity \"1.5cores\" has an "
      "unknown suffix \"cores\" (use Ki, Mi, Gi, Ti, Pi, Ei, n, u, m, k, M, G, T, P, E or an "
      "exponent such as e3)"}},
    {"cpu-slots-out-of-range.yaml",
     1,
     {"cpu-slots-out-of-range.yaml:15:34: spec.execution.cpuSlotsPerWorker: must be between 1 and "
      "64, got 0"}},
    {"credentials-two-secrets.yaml",
     1,
     {"credentials-two-secrets.yaml:16:24: spec.sink.credentialsSecret: must equal "
      "spec.source.credentialsSecret when both are set: a worker has one set of AWS credentials "
      "(sink names \"writer-creds\", source \"reader-creds\")"}},
    {"crlf-bom-invalid.yaml",
     1,
     {"crlf-bom-invalid.yaml:5:39: spec.source.format: unknown value \"txt\" (did you mean "
      "\"text\"?); must be one of jsonl, csv, text, binary, image, parquet"}},
    {"duplicate-key.yaml",
     1,
     {"duplicate-key.yaml:8:3: not valid YAML: duplicate key \"sink\" (first at line 7)"}},
    {"duplicate-stage.yaml",
     1,
     {"duplicate-stage.yaml:8:12: spec.stages[1].name: duplicate stage name \"step\" (also "
      "spec.stages[0].name)"}},
    {"empty.yaml", 1, {"empty.yaml:1:1: file is empty: expected a Pipeline manifest"}},
    {"exec-arrow.yaml",
     1,
     {"exec-arrow.yaml:12:66: spec.stages[0].args.output: output applies to framing \"lines\" "
      "only (framing \"arrow\" carries typed columns; docs/exec.md)"}},
    {"exec-bad-args.yaml",
     1,
     {"exec-bad-args.yaml:13:16: spec.stages[0].args.command: must be a non-empty list of "
      "strings, got \"python3 embed.py\"",
      "exec-bad-args.yaml:14:20: spec.stages[0].args.env.BATCH: must be a string (quote numbers "
      "and booleans)",
      "exec-bad-args.yaml:15:13: spec.stages[0].args.mode: must be one of filter, batches, got "
      "\"daemon\"",
      "exec-bad-args.yaml:16:16: spec.stages[0].args.timeout: must be a duration more than 0 "
      "(examples: 30s, 5m, 1h30m, 300ms), got \"soon\""}},
    {"filter-bad-op.yaml",
     1,
     {"filter-bad-op.yaml:12:29: spec.stages[0].args.op: must be one of eq, ne, lt, le, gt, ge, "
      "got \"equals\""}},
    {"mlp-bad-device.yaml",
     1,
     {"mlp-bad-device.yaml:12:62: spec.stages[0].args.device: must be one of auto, cpu, cuda, "
      "got \"gpu\""}},
    {"filter-missing-args.yaml",
     1,
     {"filter-missing-args.yaml:12:11: spec.stages[0].args.op: required argument of op \"filter\" "
      "is missing",
      "filter-missing-args.yaml:12:11: spec.stages[0].args.value: required argument of op "
      "\"filter\" is missing"}},
    {"filter-bool-ordering.yaml",
     1,
     {"filter-bool-ordering.yaml:12:33: spec.stages[0].args.op: \"gt\" does not apply to a boolean "
      "value (spec.stages[0].args.value is false): booleans compare with eq or ne only",
      "filter-bool-ordering.yaml:16:27: spec.stages[1].shapeArgs.cpu.op: \"le\" does not apply to "
      "a boolean value (spec.stages[1].args.value is true): booleans compare with eq or ne only",
      "filter-bool-ordering.yaml:19:41: spec.stages[2].args.value: must be a string, a finite "
      "number or a boolean, got .nan"}},
    {"gpu-negative.yaml",
     1,
     {"gpu-negative.yaml:12:22: spec.stages[0].resources.gpu: must be a non-negative integer, got "
      "-1"}},
    {"gpu-string.yaml",
     1,
     {"gpu-string.yaml:12:22: spec.stages[0].resources.gpu: must be a non-negative integer, got "
      "string \"two\""}},
    {"list-document.yaml",
     1,
     {"list-document.yaml:1:1: document is a list, not a Pipeline object (kind: Pipeline, "
      "apiVersion: streambatch.dev/v1alpha1)"}},
    {"memory-zero.yaml",
     1,
     {"memory-zero.yaml:12:25: spec.stages[0].resources.memory: must be greater than zero, got "
      "\"0\""}},
    {"missing-required.yaml",
     1,
     {"missing-required.yaml:5:3: spec.sink: required field is missing",
      "missing-required.yaml:5:11: spec.source.uri: required field is missing (or give uris, a "
      "list of URIs)",
      "missing-required.yaml:7:5: spec.stages[0].name: required field is missing"}},
    {"mode-unknown.yaml",
     1,
     {"mode-unknown.yaml:15:21: spec.execution.mode: unknown value \"stream\"; must be one of "
      "streaming, staged, static"}},
    {"no-scheme.yaml",
     1,
     {"no-scheme.yaml:7:10: spec.source.uri: \"/data/in\" has no scheme; write a URI such as "
      "file:///data/in or s3://bucket/prefix/ (the source supports file://, http://, https:// and "
      "s3://)"}},
    {"no-stages.yaml", 1, {"no-stages.yaml:6:11: spec.stages: must have at least 1 item"}},
    {"normalize-bad-std.yaml",
     1,
     {"normalize-bad-std.yaml:12:28: spec.stages[0].args.std: must not be 0 (the values are "
      "divided by it)",
      "normalize-bad-std.yaml:15:54: spec.stages[1].args.std[1]: must not be 0 (the values are "
      "divided by it)",
      "normalize-bad-std.yaml:18:18: spec.stages[2].args.mean: must be a finite number, or a list "
      "of 1 to 64 finite numbers, got \"0.5\"",
      "normalize-bad-std.yaml:18:30: spec.stages[2].args.std: must be a finite number, or a list "
      "of 1 to 64 finite numbers, got a list"}},
    {"not-a-pipeline.yaml",
     1,
     {"not-a-pipeline.yaml:2:7: kind: document is a Deployment (apps/v1), not a Pipeline (expected "
      "kind: Pipeline, apiVersion: streambatch.dev/v1alpha1)"}},
    {"only-comments.yaml",
     1,
     {"only-comments.yaml:1:1: no documents: expected a Pipeline manifest (only empty documents "
      "found)"}},
    {"image-misused.yaml",
     1,
     {"image-misused.yaml:9:22: spec.source.args.channels: must be 1 (gray), 3 (RGB) or 4 "
      "(RGBA), got 2",
      "image-misused.yaml:9:36: spec.source.args.maxPixels: must be at most 536870912 (an image "
      "of 2^29 pixels), got 1000000000",
      "image-misused.yaml:12:9: spec.stages[0].op: op \"image.decode\" does not exist in this "
      "build: the image source format decodes (source.format: image, args.channels); use "
      "image.resize to give images one size",
      "image-misused.yaml:16:13: spec.sink.format: format \"image\" is a source format only; "
      "sinks write jsonl, csv, text, binary and parquet"}},
    {"op-unknown-arg.yaml",
     1,
     {"op-unknown-arg.yaml:12:11: spec.stages[0].args: op \"bench.sleep\" needs exactly one of "
      "\"msPerRecord\" or \"msPerMB\"",
      "op-unknown-arg.yaml:12:12: spec.stages[0].args.msPerRecrd: unknown argument \"msPerRecrd\" "
      "for op \"bench.sleep\" (did you mean \"msPerRecord\"?)"}},
    {"partition-size-negative.yaml",
     1,
     {"partition-size-negative.yaml:8:20: spec.source.partitionSize: must be greater than zero, "
      "got \"-64Mi\""}},
    {"partition-size-zero.yaml",
     1,
     {"partition-size-zero.yaml:8:20: spec.source.partitionSize: must be greater than zero, got "
      "\"0\""}},
    {"partition-size-tiny.yaml",
     1,
     {"partition-size-tiny.yaml:8:20: spec.source.partitionSize: must be at least 1Ki (1024 "
      "bytes), "
      "got \"64\""}},
    {"pipeline-name-invalid.yaml",
     1,
     {"pipeline-name-invalid.yaml:4:9: metadata.name: \"My.Pipeline-\" is not a valid name: use at "
      "most 63 lowercase letters, digits, '-' and '.', starting and ending with a letter or digit "
      "(a DNS-1123 subdomain that also fits a label value)"}},
    {"placement-gpu-resources.yaml",
     1,
     {"placement-gpu-resources.yaml:14:16: spec.stages[0].placement: resources.gpu "
      "is 1 (line 13) but placement does not list gpu; list gpu, or drop "
      "resources.gpu"}},
    {"placement-op-cpu-only.yaml",
     1,
     {"placement-op-cpu-only.yaml:13:22: spec.stages[0].placement[1]: op \"filter\" "
      "has no gpu implementation: it runs on cpu only (ops that also run on gpu: "
      "bench.spin, bench.sleep, tensor.mlp, exec and plugin)"}},
    {"placement-unknown-shape.yaml",
     1,
     {"placement-unknown-shape.yaml:13:22: spec.stages[0].placement[1]: unknown "
      "shape \"gpus\" (did you mean \"gpu\"?); the shapes are cpu and gpu",
      "placement-unknown-shape.yaml:13:28: spec.stages[0].placement[2]: duplicate "
      "shape \"cpu\""}},
    {"pricing-invalid.yaml",
     1,
     {"pricing-invalid.yaml:16:28: spec.execution.pricing.cpuCoreHour: must be a "
      "number of at least 0, got -0.5",
      "pricing-invalid.yaml:16:43: spec.execution.pricing.gpuHour: must be a number, "
      "got string \"cheap\""}},
    {"resize-out-of-range.yaml",
     1,
     {"resize-out-of-range.yaml:12:32: spec.stages[0].args.height: must be an integer from 1 to "
      "65535, got 70000",
      "resize-out-of-range.yaml:15:19: spec.stages[1].args.width: must be an integer from 1 to "
      "65535, got 0"}},
    {"retries-out-of-range.yaml",
     1,
     {"retries-out-of-range.yaml:15:31: spec.execution.maxTaskRetries: must be between 0 and 100, "
      "got 1000"}},
    {"s3-bad-bucket.yaml",
     1,
     {"s3-bad-bucket.yaml:7:10: spec.source.uri: \"s3://AB/x\": S3 bucket name must be 3-63 "
      "lowercase letters, digits, '-' or '.'"}},
    {"scalar-document.yaml",
     1,
     {"scalar-document.yaml:1:1: document is a string, not a Pipeline object (kind: Pipeline, "
      "apiVersion: streambatch.dev/v1alpha1)"}},
    {"second-document-bad.yaml",
     1,
     {"second-document-bad.yaml:14:51: spec.stages[0].workers.min: must be a non-negative integer, "
      "got -1"}},
    {"shapeargs-invalid.yaml",
     1,
     {"shapeargs-invalid.yaml:15:7: spec.stages[0].shapeArgs.gpu: the stage does not "
      "run on gpu (placement lists cpu only)",
      "shapeargs-invalid.yaml:16:13: spec.stages[0].shapeArgs.cpu.msPerRecrd: "
      "unknown argument \"msPerRecrd\" for op \"bench.spin\" (did you mean "
      "\"msPerRecord\"?)"}},
    {"sink-http.yaml",
     1,
     {"sink-http.yaml:13:10: spec.sink.uri: unsupported scheme \"https\" in "
      "\"https://example.com/out\"; the sink supports file://, s3:// and stream://"}},
    {"stream-sink-file-options.yaml",
     1,
     {"stream-sink-file-options.yaml:15:11: spec.sink.mode: a stream:// sink writes no files: "
      "mode means nothing there; remove it",
      "stream-sink-file-options.yaml:16:24: spec.sink.credentialsSecret: a stream:// sink writes "
      "no files: credentialsSecret means nothing there; remove it",
      "stream-sink-file-options.yaml:18:11: spec.execution.mode: a stream:// sink needs the memory "
      "budget (a slow consumer holds the pipeline back); mode staged runs without one",
      "stream-sink-file-options.yaml:19:20: spec.execution.preserveOrder: a stream:// sink deals "
      "partitions in the order they are made; preserveOrder is not built for it"}},
    {"stream-sink-args.yaml",
     1,
     {"stream-sink-args.yaml:15:25: spec.sink.args.cacheEpochs: must be a boolean (true or "
      "false), got 1",
      "stream-sink-args.yaml:15:28: spec.sink.args.retain: unknown argument \"retain\" for a "
      "stream:// sink"}},
    /* sink.args.epochs and seed (what `run --epochs/--seed` set; on Kubernetes the only way):
     * what the stream cannot serve with them is refused here, not at start */
    {"stream-sink-epochs.yaml",
     1,
     {"stream-sink-epochs.yaml:16:20: spec.sink.args.epochs: 2 epochs: stage g (groupby) exchanges "
      "rows, and an exchange is planned once for the whole run, not per epoch; set "
      "sink.args.cacheEpochs: true (the pipeline runs once and every epoch deals its output) or "
      "run one epoch",
      "stream-sink-epochs.yaml:16:29: spec.sink.args.seed: must be a non-negative integer, got "
      "-1"}},
    /* kubectl's YAML 1.1: an unquoted `on` key arrives as "true", `n` as false */
    {"yaml11-booleans.yaml",
     1,
     {"yaml11-booleans.yaml:12:31: spec.stages[0].args.on: required argument of op \"join\" is "
      "missing",
      "yaml11-booleans.yaml:12:75: spec.stages[0].args.true: unknown argument \"true\" for op "
      "\"join\": kubectl and other YAML 1.1 readers take an unquoted on, yes or y as true and "
      "off, no or n as false; quote it (\"on\", \"n\")",
      "yaml11-booleans.yaml:13:41: spec.stages[1].args.field: must be a non-empty string, got "
      "false (kubectl and other YAML 1.1 readers take an unquoted on, yes or y as true and off, "
      "no or n as false; quote it (\"on\", \"n\"))"}},
    {"stream-sink-seed-limit.yaml",
     1,
     {"stream-sink-seed-limit.yaml:16:20: spec.sink.args.epochs: must be an integer from 1 to "
      "100000, got 0",
      "stream-sink-seed-limit.yaml:16:48: spec.sink.args.seed: a seed shuffles the order the "
      "source's splits are read in, but stage first (limit) takes the source's first rows in "
      "order; drop the seed (iter_batches' local_shuffle_buffer and seed shuffle the rows each "
      "rank gets)"}},
    {"stream-sink-path.yaml",
     1,
     {"stream-sink-path.yaml:13:10: spec.sink.uri: \"stream://trainer\": a stream sink is "
      "\"stream://\" with nothing after it (its consumers connect to `streambatch run --serve "
      "HOST:PORT`, or on Kubernetes to status.stream.address)"}},
    {"sink-equals-source.yaml",
     1,
     {"sink-equals-source.yaml:13:10: spec.sink.uri: the sink is the source directory "
      "(spec.sink.uri \"file://./data//in\", spec.source.uri \"file://data/in/\"): every run "
      "would read the previous run's output back in; write the sink to another directory or "
      "prefix (a subdirectory of the source is fine, the source listing is not recursive)"}},
    {"sink-in-source-glob.yaml",
     1,
     {"sink-in-source-glob.yaml:13:10: spec.sink.uri: the sink is the directory the source glob "
      "lists (spec.sink.uri \"s3://bucket/events/\", spec.source.uri "
      "\"s3://bucket/events/*.jsonl\"): every run would read the previous run's output back "
      "in; write the sink to another directory or prefix (a subdirectory of the source is fine, "
      "the source listing is not recursive)"}},
    {"sink-mode-unknown.yaml",
     1,
     {"sink-mode-unknown.yaml:15:11: spec.sink.mode: unknown value \"replace\"; must be one of "
      "overwrite, append, errorIfExists, ignore"}},
    {"source-uri-and-uris.yaml",
     1,
     {"source-uri-and-uris.yaml:7:11: spec.source.uris: give either uri or uris, not both"}},
    {"source-uris-bad.yaml",
     1,
     {"source-uris-bad.yaml:9:7: spec.source.uris[2]: unsupported scheme \"ftp\" in "
      "\"ftp://data.example.com/c.csv\"; the source supports file://, http://, https:// and s3://",
      "source-uris-bad.yaml:10:7: spec.source.uris[3]: must be a non-empty URI",
      "source-uris-bad.yaml:11:7: spec.source.uris[4]: \"https:///no-host.csv\" has no host",
      "source-uris-bad.yaml:12:7: spec.source.uris[5]: must be a string, got integer 42"}},
    {"source-uris-empty.yaml",
     1,
     {"source-uris-empty.yaml:6:11: spec.source.uris: must list at least one URI"}},
    {"spin-both-args.yaml",
     1,
     {"spin-both-args.yaml:12:11: spec.stages[0].args: op \"bench.spin\" needs exactly one of "
      "\"msPerRecord\" or \"msPerMB\""}},
    {"spin-no-args.yaml",
     1,
     {"spin-no-args.yaml:10:5: spec.stages[0].args: op \"bench.spin\" needs exactly one of "
      "\"msPerRecord\" or \"msPerMB\""}},
    {"stage-name-uppercase.yaml",
     1,
     {"stage-name-uppercase.yaml:10:11: spec.stages[0].name: \"Decode_Images\" is not a valid "
      "name: use at most 63 lowercase letters, digits and '-', starting and ending with a letter "
      "or digit (a DNS-1123 label, because it becomes part of pod names and label values)"}},
    {"stall-timeout-bad.yaml",
     1,
     {"stall-timeout-bad.yaml:15:29: spec.execution.stallTimeout: invalid duration \"5min\" "
      "(examples: 30s, 5m, 1h30m, 300ms)"}},
    {"suspend-yes.yaml",
     1,
     {"suspend-yes.yaml:15:12: spec.suspend: must be a boolean (true or false), got string "
      "\"yes\""}},
    {"tabs.yaml",
     1,
     {"tabs.yaml:4:1: not valid YAML: a tab character here: YAML indentation must use spaces, not "
      "tabs"}},
    {"target-invalid.yaml",
     1,
     {"target-invalid.yaml:16:29: spec.execution.target.rowsPerSecond: must be a "
      "number more than 0, got 0",
      "target-invalid.yaml:16:42: spec.execution.target.deadline: give rowsPerSecond "
      "or deadline, not both",
      "target-invalid.yaml:16:62: spec.execution.target.maxCostPerHour: must be a "
      "number more than 0, got -2"}},
    {"template-mount-over-spill.yaml",
     1,
     {"template-mount-over-spill.yaml:19:31: spec.workerTemplate.volumeMounts[0].mountPath: "
      "\"/tmp/data\" collides with the worker's spill directory /tmp (an emptyDir the controller "
      "mounts); mount elsewhere"}},
    {"template-node-selector-int.yaml",
     1,
     {"template-node-selector-int.yaml:15:40: spec.workerTemplate.nodeSelector.gpu: must be a "
      "string, got integer 1 (quote it)"}},
    {"template-pull-policy.yaml",
     1,
     {"template-pull-policy.yaml:15:49: spec.workerTemplate.imagePullPolicy: unknown value "
      "\"Sometimes\"; must be one of Always, IfNotPresent, Never"}},
    {"ttl-negative.yaml",
     1,
     {"ttl-negative.yaml:15:28: spec.ttlSecondsAfterFinished: must be a non-negative integer, got "
      "-5"}},
    {"unclosed-flow.yaml",
     1,
     {"unclosed-flow.yaml:4:1: not valid YAML: did not find expected ',' or '}' while parsing a "
      "flow mapping"}},
    {"unknown-alias.yaml",
     1,
     {"unknown-alias.yaml:3:11: not valid YAML: unknown alias \"*meta\" (no finished anchor "
      "\"&meta\")"}},
    {"unknown-field-far.yaml",
     1,
     {"unknown-field-far.yaml:12:5: spec.stages[0].color: unknown field \"color\""}},
    {"unknown-field-typo.yaml",
     1,
     {"unknown-field-typo.yaml:12:5: spec.stages[0].resorces: unknown field \"resorces\" (did you "
      "mean \"resources\"?)"}},
    {"unknown-format.yaml",
     1,
     {"unknown-format.yaml:8:13: spec.source.format: unknown value \"orc\"; must be one of "
      "jsonl, csv, text, binary, image, parquet"}},
    {"unknown-op-no-suggestion.yaml",
     1,
     {"unknown-op-no-suggestion.yaml:11:9: spec.stages[0].op: unknown op \"sql.query\"; built-in "
      "ops are identity, bench.spin, bench.sleep, filter, project, image.resize, "
      "image.normalize, tensor.mlp, exec, plugin, repartition, random_shuffle, groupby, "
      "distinct, limit, join and sort"}},
    {"unknown-op.yaml",
     1,
     {"unknown-op.yaml:11:9: spec.stages[0].op: unknown op \"tensor.mlpp\" (did you mean "
      "\"tensor.mlp\"?)"}},
    {"unsupported-scheme.yaml",
     1,
     {"unsupported-scheme.yaml:7:10: spec.source.uri: unsupported scheme \"ftp\" in "
      "\"ftp://host/data\"; the source supports file://, http://, https:// and s3://"}},
    {"workers-min-gt-default-max.yaml",
     1,
     {"workers-min-gt-default-max.yaml:12:14: spec.stages[0].workers: min (20) must not exceed max "
      "(16, the default)"}},
    {"workers-min-gt-max.yaml",
     1,
     {"workers-min-gt-max.yaml:12:14: spec.stages[0].workers: min (8) must not exceed max (2)"}},
    {"workers-wrong-type.yaml",
     1,
     {"workers-wrong-type.yaml:12:14: spec.stages[0].workers: must be an object, got integer 3"}},
    {"wrong-api-version.yaml",
     1,
     {"wrong-api-version.yaml:1:13: apiVersion: unsupported apiVersion \"streambatch.dev/v1\"; "
      "this version reads \"streambatch.dev/v1alpha1\""}},
};
#define NCASES (sizeof cases / sizeof *cases)

Test(validate_cli, invalid_table)
{
    for (size_t i = 0; i < NCASES; i++) {
        char cmd[1024], *out = NULL;
        snprintf(cmd, sizeof cmd, "cd %s/tests/invalid && %s validate -q '%s' 2>&1", sb_test_root(),
                 sb_test_bin("streambatch"), cases[i].file);
        int rc = sb_test_run(cmd, &out);
        cr_expect_eq(rc, cases[i].rc, "%s: exit %d, want %d", cases[i].file, rc, cases[i].rc);
        size_t nl = 0;
        for (size_t k = 0; k < 4 && cases[i].lines[k] != NULL; k++, nl++)
            cr_expect(sb_test_has_line(out, cases[i].lines[k]), "%s: missing line\n  %s\ngot:\n%s",
                      cases[i].file, cases[i].lines[k], out);
        cr_expect_eq(sb_test_count_lines(out), nl, "%s: %zu lines, want %zu:\n%s", cases[i].file,
                     sb_test_count_lines(out), nl, out);
        free(out);
    }
}

Test(validate_cli, table_covers_every_invalid_file)
{
    char dir[512];
    snprintf(dir, sizeof dir, "%s/tests/invalid", sb_test_root());
    DIR *d = opendir(dir);
    cr_assert_not_null(d);
    size_t files = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.')
            continue;
        files++;
        int found = 0;
        for (size_t i = 0; i < NCASES && !found; i++)
            found = strcmp(cases[i].file, e->d_name) == 0;
        cr_expect(found, "tests/invalid/%s has no row in the table", e->d_name);
    }
    closedir(d);
    cr_expect_eq(files, NCASES);
}

Test(validate_cli, examples_are_valid)
{
    char cmd[1024], *out = NULL;
    snprintf(cmd, sizeof cmd, "cd %s && %s validate api/examples/*.yaml 2>&1", sb_test_root(),
             sb_test_bin("streambatch"));
    int rc = sb_test_run(cmd, &out);
    cr_expect_eq(rc, 0, "examples: exit %d:\n%s", rc, out);
    cr_expect(strstr(out, "0 problems in 9 documents of 8 files") != NULL, "%s", out);
    free(out);
    /* the Pipeline of the trainer Job example (docs/training.md, "On Kubernetes") */
    snprintf(cmd, sizeof cmd, "cd %s && %s validate api/examples/training/k8s-pipeline.yaml 2>&1",
             sb_test_root(), sb_test_bin("streambatch"));
    rc = sb_test_run(cmd, &out);
    cr_expect_eq(rc, 0, "k8s-pipeline.yaml: exit %d:\n%s", rc, out);
    free(out);
}

Test(validate_cli, usage_errors_exit_2)
{
    char cmd[1024], *out = NULL;
    snprintf(cmd, sizeof cmd, "%s validate 2>&1", sb_test_bin("streambatch"));
    cr_expect_eq(sb_test_run(cmd, &out), 2);
    cr_expect(strstr(out, "no files given") != NULL, "%s", out);
    free(out);
    snprintf(cmd, sizeof cmd, "%s validate --bogus x.yaml 2>&1", sb_test_bin("streambatch"));
    cr_expect_eq(sb_test_run(cmd, &out), 2);
    cr_expect(strstr(out, "unknown option --bogus") != NULL, "%s", out);
    free(out);
    snprintf(cmd, sizeof cmd, "%s frobnicate 2>&1", sb_test_bin("streambatch"));
    cr_expect_eq(sb_test_run(cmd, &out), 2);
    free(out);
}

Test(validate_cli, missing_file_and_directory)
{
    char cmd[1024], *out = NULL;
    snprintf(cmd, sizeof cmd, "%s validate -q /nonexistent/p.yaml %s/tests 2>&1",
             sb_test_bin("streambatch"), sb_test_root());
    cr_expect_eq(sb_test_run(cmd, &out), 1);
    cr_expect(strstr(out, "/nonexistent/p.yaml: cannot open: No such file or directory") != NULL,
              "%s", out);
    cr_expect(strstr(out, "tests: is a directory, not a file") != NULL, "%s", out);
    free(out);
}

Test(validate_cli, stdin)
{
    char cmd[1024], *out = NULL;
    snprintf(cmd, sizeof cmd, "cd %s && cat tests/invalid/unknown-op.yaml | %s validate -q - 2>&1",
             sb_test_root(), sb_test_bin("streambatch"));
    cr_expect_eq(sb_test_run(cmd, &out), 1);
    cr_expect(strstr(out, "<stdin>:11:9: spec.stages[0].op: unknown op \"tensor.mlpp\"") != NULL,
              "%s", out);
    free(out);
}

/* Hostile inputs generated at test time: each gets one clear line and exit 1, quickly. */
static void hostile(const char *name, const char *gen, const char *want)
{
    char dir[] = "/tmp/sbtest-XXXXXX";
    cr_assert_not_null(mkdtemp(dir));
    char cmd[2048], *out = NULL;
    snprintf(cmd, sizeof cmd, "cd %s && %s > %s", dir, gen, name);
    cr_assert_eq(sb_test_run(cmd, &out), 0, "generator failed: %s", out);
    free(out);
    snprintf(cmd, sizeof cmd, "cd %s && timeout 20 %s validate -q %s 2>&1", dir,
             sb_test_bin("streambatch"), name);
    int rc = sb_test_run(cmd, &out);
    cr_expect_eq(rc, 1, "%s: exit %d\n%s", name, rc, out);
    cr_expect(strstr(out, want) != NULL, "%s: want \"%s\" in:\n%s", name, want, out);
    cr_expect_eq(sb_test_count_lines(out), 1, "%s", out);
    free(out);
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    cr_expect_eq(sb_test_run(cmd, &out), 0);
    free(out);
}

Test(validate_cli, hundred_megabyte_file)
{
    hostile("big.yaml", "head -c 104857600 /dev/zero | tr '\\0' 'a'",
            "big.yaml: file is 104857600 bytes; manifests are limited to 8388608 bytes");
}

Test(validate_cli, deep_nesting)
{
    hostile("deep.yaml", "python3 -c \"print('spec: ' + '['*10000 + ']'*10000)\"",
            "deep.yaml:1:70: not valid YAML: nesting is deeper than 64 levels");
}

Test(validate_cli, deep_block_nesting)
{
    hostile("deepblock.yaml", "python3 -c \"print(''.join(' '*i + 'k:\\n' for i in range(2000)))\"",
            "not valid YAML: nesting is deeper than 64 levels");
}

Test(validate_cli, alias_bomb)
{
    hostile("bomb.yaml",
            "python3 -c \"print('a: &a [x,x,x,x,x,x,x,x,x]'); "
            "[print('%s: &%s [%s]' % (chr(97+i), chr(97+i), ','.join(['*'+chr(96+i)]*9))) "
            "for i in range(1,12)]\"",
            "not valid YAML: document has more than 200000 nodes (counting alias expansions)");
}

/* The sink-vs-source rule (docs/pipeline-api.md, spec.sink): equal after normalizing, or the
 * directory of a source glob, is refused; a subdirectory, a sibling or another scheme is not. */
Test(validate_cli, sink_seen_by_the_source_listing)
{
    static const struct {
        const char *src, *sink, *cwd;
        int refused;
    } rules[] = {
        {"file:///data/in", "file:///data/in", NULL, 1},
        {"file:///data/in/", "file:///data//./in", NULL, 1},
        {"file://data/in", "file:///work/data/in/", "/work", 1},
        {"file://./data/in", "file://data/x/../in", "/w", 1},
        {"file://data/in", "file:///work/data/in", NULL, 0}, /* no cwd: compared as written */
        {"file:///data/*.jsonl", "file:///data", NULL, 1},
        {"file:///data/in/*.jsonl", "file:///data/in/out", NULL, 0},
        {"file:///data/in", "file:///data/in/out", NULL, 0},
        {"file:///data/in", "file:///data/inx", NULL, 0},
        {"file:///data/in", "file:///data", NULL, 0},
        {"s3://b/events/", "s3://b/events", NULL, 1},
        {"s3://b/events//x/", "s3://b/events/./x", NULL, 1},
        {"s3://b/events/*.jsonl", "s3://b/events/", NULL, 1},
        {"s3://b/events/", "s3://b/events/out/", NULL, 0},
        {"s3://b/events", "s3://c/events", NULL, 0},
        {"S3://b/p", "s3://b/p/", NULL, 1},
        {"file:///b/p", "s3://b/p", NULL, 0},
        {"https://h/b/p", "s3://h/b/p", NULL, 0},
        {"file://", "file://", "/w", 0}, /* no path: the URI checks report it, once */
    };
    for (size_t i = 0; i < sizeof rules / sizeof *rules; i++) {
        char msg[1200] = "";
        int r =
            sb_validate_sink_vs_source(rules[i].src, rules[i].sink, rules[i].cwd, msg, sizeof msg);
        cr_expect_eq(r, rules[i].refused, "source %s sink %s (cwd %s): got %d, want %d: %s",
                     rules[i].src, rules[i].sink, rules[i].cwd ? rules[i].cwd : "none", r,
                     rules[i].refused, msg);
        if (r)
            cr_expect(strstr(msg, "spec.sink.uri") && strstr(msg, "spec.source.uri"), "%s", msg);
    }
}

/* kubectl reads manifests as YAML 1.1, where an unquoted on/yes/y is true and off/no/n false;
 * validate (YAML 1.2) reads them as words. A join applied with kubectl lost its `on:` that way
 * while `streambatch run` took it: each such key or value gets a warning naming where, the
 * quoted word none, and the file stays valid (exit 0). */
Test(validate_cli, yaml11_words_are_warned)
{
    char dir[] = "/tmp/sbtest-XXXXXX";
    cr_assert_not_null(mkdtemp(dir));
    static const char *const head = "apiVersion: streambatch.dev/v1alpha1\n"
                                    "kind: Pipeline\n"
                                    "metadata:\n"
                                    "  name: p\n"
                                    "spec:\n"
                                    "  source: {uri: 'file:///in', format: jsonl}\n"
                                    "  sink: {uri: 'file:///out', format: jsonl}\n"
                                    "  stages:\n";
    static const char *const plain =
        "  - name: j\n"
        "    op: join\n"
        "    args:\n"
        "      right: {uri: 'file:///r/', format: jsonl}\n"
        "      on: [k]\n"
        "  - {name: f, op: filter, args: {field: n, op: eq, value: \"yes\"}}\n";
    static const char *const quoted =
        "  - name: j\n"
        "    op: join\n"
        "    args:\n"
        "      right: {uri: 'file:///r/', format: jsonl}\n"
        "      \"on\": [k]\n"
        "  - {name: f, op: filter, args: {field: 'n', op: eq, value: \"yes\"}}\n";
    const char *bodies[] = {plain, quoted};
    for (int q = 0; q < 2; q++) {
        char path[600], cmd[1400], *out = NULL;
        snprintf(path, sizeof path, "%s/y%d.yaml", dir, q);
        FILE *f = fopen(path, "w");
        cr_assert_not_null(f);
        fprintf(f, "%s%s", head, bodies[q]);
        fclose(f);
        snprintf(cmd, sizeof cmd, "cd %s && %s validate -q y%d.yaml 2>&1", dir,
                 sb_test_bin("streambatch"), q);
        int rc = sb_test_run(cmd, &out);
        cr_expect_eq(rc, 0, "y%d.yaml: exit %d:\n%s", q, rc, out);
        if (q == 0) {
            cr_expect(sb_test_has_line(out, "y0.yaml:13:7: warning: unquoted on is the string "
                                            "\"on\" here, but kubectl and other YAML 1.1 readers "
                                            "take it as true: quote it (\"on\") to keep the word"),
                      "%s", out);
            cr_expect(sb_test_has_line(out, "y0.yaml:14:41: warning: unquoted n is the string "
                                            "\"n\" here, but kubectl and other YAML 1.1 readers "
                                            "take it as false: quote it (\"n\") to keep the word"),
                      "%s", out);
            cr_expect_eq(sb_test_count_lines(out), 2, "%s", out);
        } else {
            cr_expect_eq(sb_test_count_lines(out), 0, "quoted words warned:\n%s", out);
        }
        free(out);
    }
    char cmd[600], *out = NULL;
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    cr_expect_eq(sb_test_run(cmd, &out), 0);
    free(out);
}

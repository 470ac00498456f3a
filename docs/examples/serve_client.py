#!/usr/bin/env python3
"""A short client of `mnemo serve` (docs/serving.md).

Make the Python stubs once, from the repository's root:

    pip install grpcio grpcio-tools
    mkdir -p stubs
    python3 -m grpc_tools.protoc -I proto --python_out=stubs \
        --grpc_python_out=stubs proto/mnemo/v1/inference.proto

then, with `mnemo serve --from RUN` listening on ADDRESS:

    PYTHONPATH=stubs python3 docs/examples/serve_client.py ADDRESS SRC DST...

It scores SRC against the DSTs now, asks for the best 3 of them, then
ingests one event SRC -> DST[0] a second after the memory's time and
scores again: the score moves with the memory.
"""
import sys

import grpc

from mnemo.v1 import inference_pb2 as pb
from mnemo.v1 import inference_pb2_grpc as rpc


def main():
    if len(sys.argv) < 4:
        sys.exit(__doc__)
    address, src, dst = sys.argv[1], int(sys.argv[2]), [int(d) for d in sys.argv[3:]]
    stub = rpc.InferenceStub(grpc.insecure_channel(address))

    scores = stub.Score(pb.ScoreRequest(src=src, dst=dst))
    print(f"memory at t {scores.version.time} "
          f"({scores.version.events_applied} events ingested)")
    for d, p in zip(dst, scores.probability):
        print(f"  P({src} -> {d}) = {p:.4f}")

    top = stub.TopK(pb.TopKRequest(src=src, k=3, candidates=dst))
    print("best:", list(zip(top.dst, (round(p, 4) for p in top.probability))))

    event = pb.Event(src=src, dst=dst[0], t=scores.version.time + 1)
    for ack in stub.Ingest(iter([pb.IngestRequest(events=[event])])):
        print(f"ingested: logit {ack.positive_logit[0]:.4f} against "
              f"negative {ack.negative[0]} ({ack.negative_logit[0]:.4f}); "
              f"memory at t {ack.version.time}")

    again = stub.Score(pb.ScoreRequest(src=src, dst=dst[:1]))
    print(f"  P({src} -> {dst[0]}) = {again.probability[0]:.4f} now")


if __name__ == "__main__":
    main()

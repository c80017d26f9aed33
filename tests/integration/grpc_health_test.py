"""The standard gRPC health service (grpc.health.v1.Health, as grpc_health_probe and Kubernetes'
grpc probes call it) on the coordinator's client port follows readiness: SERVING while the
cluster serves, NOT_SERVING while it drains (AdminService.Drain), SERVING again after Undrain; it
answers without an API key.

    grpc_health_test.py --bin-dir BUILD/bin --model MODEL.gguf [unittest args]
"""

import time
import unittest

from grpc_health.v1 import health_pb2, health_pb2_grpc

from tpserve_cluster import run_tests, start_class_grpc

SERVING = health_pb2.HealthCheckResponse.SERVING
NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING


class GrpcHealthTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.protos, cls.cluster, cls.channel, cls.admin_channel = start_class_grpc(cls, tp=1)
        cls.health = health_pb2_grpc.HealthStub(cls.channel)
        cls.admin = cls.protos.admin_pb2_grpc.AdminServiceStub(cls.admin_channel)

    def status(self):
        return self.health.Check(health_pb2.HealthCheckRequest(service=""), timeout=5).status

    def await_status(self, wanted, timeout_s=5):
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.status() == wanted:
                return
            time.sleep(0.05)
        self.fail(f"grpc.health.v1 did not turn {wanted} within {timeout_s} s: {self.status()}")

    def test_follows_readiness(self):
        self.await_status(SERVING)
        pb = self.protos.admin_pb2
        self.admin.Drain(pb.DrainRequest(), timeout=10)
        self.await_status(NOT_SERVING)
        self.admin.Undrain(pb.UndrainRequest(), timeout=10)
        self.await_status(SERVING)


if __name__ == "__main__":
    run_tests()

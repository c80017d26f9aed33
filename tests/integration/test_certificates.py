"""Certificates for the tests that turn mutual TLS on, made with the openssl CLI."""

import os
import subprocess


def make_certificates(directory, names):
    """In `directory`: the cluster's CA (ca.crt; its key is removed) and one certificate it signed
    (node.crt, node.key) for servers and clients alike, whose SANs are `names`, localhost and
    127.0.0.1."""
    def openssl(*args):
        subprocess.run(["openssl", *args], check=True, capture_output=True, timeout=60)

    sans = ",".join([f"DNS:{n}" for n in names] + ["DNS:localhost", "IP:127.0.0.1"])
    with open(f"{directory}/ext.cnf", "w") as f:
        f.write("basicConstraints=CA:FALSE\nkeyUsage=digitalSignature,keyEncipherment\n"
                f"extendedKeyUsage=serverAuth,clientAuth\nsubjectAltName={sans}\n")
    curve = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
    openssl("req", "-x509", *curve, "-days", "2", "-subj", "/CN=tpserve test CA",
            "-keyout", f"{directory}/ca.key", "-out", f"{directory}/ca.crt")
    openssl("req", *curve, "-subj", "/CN=tpserve node", "-keyout", f"{directory}/node.key",
            "-out", f"{directory}/node.csr")
    openssl("x509", "-req", "-in", f"{directory}/node.csr", "-CA", f"{directory}/ca.crt",
            "-CAkey", f"{directory}/ca.key", "-CAcreateserial", "-days", "2",
            "-extfile", f"{directory}/ext.cnf", "-out", f"{directory}/node.crt")
    os.remove(f"{directory}/ca.key")

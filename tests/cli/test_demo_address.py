"""The demo checks its address before loading the model."""

from __future__ import annotations

import pytest

from captioning.cli.main import main as captioning_main


def test_the_demo_checks_its_address_before_loading_the_model(good_checkpoint, capsys) -> None:
    import socket

    from captioning.cli.demo import check_address

    with pytest.raises(SystemExit):
        captioning_main(["demo", "--checkpoint", str(good_checkpoint), "--port", "70000"])
    assert "70000 is not a port number (1-65535)" in capsys.readouterr().err
    assert "not an address of this machine" in check_address("not a host", 7860)
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        assert "Address already in use" in check_address("127.0.0.1", port)

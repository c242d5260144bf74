"""The system-call table both backends filter with, against the kernel's own
numbering (the installed headers), so a wrong number cannot pass silently."""

import re
from pathlib import Path

import pytest

from resources.sandbox import (
    CLONE3_SYSCALL,
    CLONE_SYSCALL,
    DENIED_SYSCALLS,
    PERSONALITY_SYSCALL,
    docker_seccomp_profile,
    seccomp_program,
)

HEADERS = {0: Path("/usr/include/x86_64-linux-gnu/asm/unistd_64.h"), 1: Path("/usr/include/asm-generic/unistd.h")}


@pytest.mark.parametrize("column", [0, 1], ids=["x86_64", "aarch64"])
def test_the_numbers_are_the_kernels(column):
    header = HEADERS[column]
    if not header.exists():
        pytest.fail(f"{header} is not installed: apt-get install linux-libc-dev")
    numbers = {m[0]: int(m[1]) for m in re.findall(r"#define __NR3?2?_(\w+)\s+(\d+)", header.read_text())}
    table = {**DENIED_SYSCALLS, "clone": CLONE_SYSCALL, "clone3": CLONE3_SYSCALL, "personality": PERSONALITY_SYSCALL}
    for name, pair in table.items():
        assert pair[column] == numbers.get(name), name


def test_the_program_and_the_profile_cover_the_same_calls():
    program = seccomp_program()
    assert len(program) % 8 == 0 and len(program) // 8 < 4096
    profile = docker_seccomp_profile()
    denied = set(profile["syscalls"][0]["names"])
    assert denied == {n for n, pair in DENIED_SYSCALLS.items() if pair[0 if "X86" in profile["architectures"][0] else 1]}


def test_a_profile_may_allow_denied_calls_and_only_those():
    profile = docker_seccomp_profile(frozenset({"chroot", "ptrace"}))
    denied = set(profile["syscalls"][0]["names"])
    assert "chroot" not in denied and "ptrace" not in denied and {"mount", "unshare", "bpf"} <= denied
    with pytest.raises(ValueError, match="not denied, so not to be allowed: \\['read'\\]"):
        docker_seccomp_profile(frozenset({"read"}))

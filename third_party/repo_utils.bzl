"""Helpers shared by Magi's configure-style repository rules."""

def read_define(content, name):
    """Returns the value of `#define name value` in C header text `content`, or None."""
    for line in content.splitlines():
        parts = [p for p in line.strip().replace("\t", " ").split(" ") if p]
        if len(parts) >= 3 and parts[0] == "#define" and parts[1] == name:
            return parts[2]
    return None

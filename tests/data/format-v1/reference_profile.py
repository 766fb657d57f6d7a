#!/usr/bin/env python3
"""The segments of ref-1000, the fixture's reference-workload profile, as a
DMP row file (user,segment,@expiry) on stdout. The test that reads the
fixture (tests/integration/format_fixture_test.cc, ReferenceProfile) draws
the same segments with the same generator: keep the two in step.

splitmix64 seeded with 16; each draw takes two values: id = next % 82000,
hour = next % 720; an id drawn before is skipped (its hour too); until
1,000 distinct ids. Expiry = 4000003200 + 3600 * hour (whole hours, 2096).
"""
MASK = (1 << 64) - 1


class SplitMix64:
    def __init__(self, seed):
        self.state = seed & MASK

    def next(self):
        self.state = (self.state + 0x9E3779B97F4A7C15) & MASK
        z = self.state
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK
        return z ^ (z >> 31)


def main():
    rng = SplitMix64(16)
    seen = set()
    while len(seen) < 1000:
        seg = rng.next() % 82000
        hour = rng.next() % 720
        if seg in seen:
            continue
        seen.add(seg)
        print(f"ref-1000,{seg},@{4000003200 + 3600 * hour}")


if __name__ == "__main__":
    main()

#!/bin/bash
grep -qx 2.0 /app/mean.txt && echo 1 > /logs/verifier/reward.txt || echo 0 > /logs/verifier/reward.txt

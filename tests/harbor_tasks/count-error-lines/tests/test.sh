#!/bin/bash
# Harbor convention: the reward goes to /logs/verifier/reward.txt.
python3 /tests/check_outputs.py
if [ $? -eq 0 ]; then echo 1 > /logs/verifier/reward.txt; else echo 0 > /logs/verifier/reward.txt; fi

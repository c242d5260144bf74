#!/bin/bash
cat /app/logs/*.log | grep -c ERROR > /app/error_count.txt

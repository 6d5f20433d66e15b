#!/bin/bash
# Archive all .txt files below /app/data into /app/backup.tar.gz.
set -e
cd /app/data
tar czf /app/backup.tar.gz *.txt

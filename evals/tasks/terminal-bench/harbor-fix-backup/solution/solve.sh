#!/bin/bash
cat > /app/backup.sh <<'SH'
#!/bin/bash
# Archive all .txt files below /app/data into /app/backup.tar.gz.
set -e
cd /app/data
find . -name '*.txt' -type f -print0 | sort -z | tar czf /app/backup.tar.gz --null -T -
SH

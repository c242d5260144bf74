"""Oracle of sqlite_change_set level 1 (changes.csv): each row's insert,
update or delete applied to TABLE of DB in file order. Runs in the
workspace."""

import csv
import sqlite3

# ---- parameters (the generator writes the task's values here)
DB = 'records.db'
TABLE = 'records'
KEY = 'id'
GROUP = 'group'
VALUE = 'value'
# ---- end of parameters

con = sqlite3.connect(DB)
with open('changes.csv', newline='') as f:
    for row in csv.DictReader(f):
        if row['op'] == 'delete':
            con.execute('DELETE FROM %s WHERE %s = ?' % (TABLE, KEY), (row[KEY],))
        elif row['op'] == 'insert':
            con.execute('INSERT INTO %s (%s, %s, %s) VALUES (?, ?, ?)' % (TABLE, KEY, GROUP, VALUE),
                        (row[KEY], row[GROUP], float(row[VALUE])))
        else:
            con.execute('UPDATE %s SET %s = ?, %s = ? WHERE %s = ?' % (TABLE, GROUP, VALUE, KEY),
                        (row[GROUP], float(row[VALUE]), row[KEY]))
con.commit()

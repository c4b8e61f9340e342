-- amount is stored in cents
select id as order_id, user_id as customer_id, order_date, status, amount / 100 as amount
from {{ ref('raw_orders') }}
